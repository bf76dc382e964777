"""Validate the LLM app's vLLM options before a deploy, in the runtime environment, without loading weights.

Run as ``python -m llm.check_args MODEL '<engine_args json>' ['<frontend_args json>']`` from serve_apps/:
prints ``{"ok": true}`` or ``{"ok": false, "field": ..., "error": ...}``. raylift calls it so a bad
option fails the deploy task in seconds, naming the field, instead of a replica failing minutes later.
The options are parsed exactly as the replica parses them (``llm.vllm_options.vllm_namespace``: vLLM's
own ``vllm serve`` parser and checks), so what passes here is what the replica will accept.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any


def check(model: str, engine_args: dict[str, Any], frontend_args: dict[str, Any] | None = None) -> dict[str, Any]:
    from llm.vllm_options import vllm_api, vllm_namespace

    engine_cls = vllm_api("AsyncEngineArgs")
    known = {f.name for f in dataclasses.fields(engine_cls)}
    for name in engine_args:
        if name not in known:
            return {"ok": False, "field": name, "error": f"vLLM has no engine arg {name!r}"}
    try:
        ns = vllm_namespace(model, "check", {**(frontend_args or {}), **engine_args})
        # Builds the full engine config from the model's config.json (no weights are loaded), which
        # is where vLLM range-checks values such as max_model_len or block sizes.
        engine_cls.from_cli_args(ns).create_engine_config()
    except Exception as exc:  # vLLM raises ValueError, TypeError, pydantic errors...
        return {"ok": False, "field": None, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True}


if __name__ == "__main__":
    frontend = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
    print(json.dumps(check(sys.argv[1], json.loads(sys.argv[2]), frontend)))
