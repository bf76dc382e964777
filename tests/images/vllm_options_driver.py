"""Run inside a vLLM image's stand-in Python: the LLM app's own steps from Serve args to vLLM engine args.

Used by tests/images/test_image_vllm_options.py as ``python vllm_options_driver.py < jobs.json``, with
``serve_apps/`` and (for a vLLM that is not the runtime's) that vLLM's own sources first on PYTHONPATH. For
each job (a profile's Serve ``args``) it does what ``llm.app.LLMServer.__init__`` does before it builds an
engine: ``LLMArgs(**args).vllm_options()``, ``llm.vllm_options.vllm_namespace`` (vLLM's own FlexibleArgumentParser
+ make_arg_parser + the ``--config`` loader, then its serve-args checks) and ``AsyncEngineArgs.from_cli_args``.
When that fails, each option is parsed alone (beside model and name) so every option vLLM refuses is named,
not only the first. Prints one JSON object: which vLLM ran, on which platform, the source files of every vLLM
module the parse imported, and per job what was refused and what the parsed values are.

Standard library at import time; nothing here starts an engine, loads weights or touches a device.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _why(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:1500]


def _jsonable(value: Any) -> Any:
    """A parsed value as JSON can hold it (vLLM parses dict options into dicts; anything else as its repr)."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def run_job(args: dict[str, Any]) -> dict[str, Any]:
    from llm.app import LLMArgs
    from llm.vllm_options import vllm_api, vllm_namespace

    parsed = LLMArgs(**args)
    options = parsed.vllm_options()
    out: dict[str, Any] = {"options": _jsonable(options), "refused": {}, "error": None, "parsed": {}}
    try:
        ns = vllm_namespace(parsed.model, parsed.served_model_name, options)
        engine_args = vllm_api("AsyncEngineArgs").from_cli_args(ns)
        propagate = vllm_api("propagate_flash_late_interaction", optional=True)
        if propagate is not None:
            propagate(ns, engine_args)
    except Exception as exc:  # noqa: BLE001 - whatever vLLM raises is the verdict, reported by name
        out["error"] = _why(exc)
        try:  # the conversion itself, with no option at all
            vllm_namespace(parsed.model, parsed.served_model_name, {})
        except Exception as bare:  # noqa: BLE001
            out["refused"]["(no option: model and served_model_name only)"] = _why(bare)
            return out
        for name, value in options.items():
            try:
                one = vllm_namespace(parsed.model, parsed.served_model_name, {name: value})
                vllm_api("AsyncEngineArgs").from_cli_args(one)
            except Exception as alone:  # noqa: BLE001
                out["refused"][name] = _why(alone)
        return out
    # what vLLM made of each option: the engine arg's value, or the namespace's for a front-end option
    for name in options:
        holder = engine_args if hasattr(engine_args, name) else ns
        out["parsed"][name] = _jsonable(getattr(holder, name, "<absent>"))
    return out


def main() -> None:
    jobs: dict[str, dict[str, Any]] = json.load(sys.stdin)
    import vllm
    from vllm.platforms import current_platform

    results = {name: run_job(args) for name, args in jobs.items()}
    root = vllm.__file__.rsplit("/", 2)[0] + "/"  # the folder holding the vllm package
    modules = sorted(
        m.__file__[len(root) :]
        for name, m in list(sys.modules.items())
        if (name == "vllm" or name.startswith("vllm.")) and getattr(m, "__file__", None)
        and m.__file__.startswith(root) and m.__file__.endswith(".py")
    )
    report = {
        "vllm_version": vllm.__version__,
        "vllm_file": vllm.__file__,
        "platform": type(current_platform).__name__,
        "modules": modules,
        "jobs": results,
    }
    print("RAYLIFT-DRIVER " + json.dumps(report))


if __name__ == "__main__":
    main()
