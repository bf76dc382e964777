"""Validate vLLM engine args before a deploy, in the runtime environment, without loading weights.

Run as ``python -m llm.check_args MODEL '<json>'`` from serve_apps/: prints ``{"ok": true}`` or
``{"ok": false, "field": ..., "error": ...}``. raylift calls it so a bad engine arg fails the deploy
task in seconds, naming the field, instead of a replica failing minutes later.
"""

from __future__ import annotations

import dataclasses
import json
import sys


def check(model: str, engine_args: dict) -> dict:
    from vllm import AsyncEngineArgs

    known = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    for name in engine_args:
        if name not in known:
            return {"ok": False, "field": name, "error": f"vLLM has no engine arg {name!r}"}
    try:
        # Builds the full engine config from the model's config.json (no weights are loaded), which
        # is where vLLM range-checks values such as max_model_len or block sizes.
        AsyncEngineArgs(model=model, **engine_args).create_engine_config()
    except Exception as exc:  # vLLM raises ValueError, TypeError, pydantic errors...
        return {"ok": False, "field": None, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True}


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1], json.loads(sys.argv[2]))))
