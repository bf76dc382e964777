"""serve_apps/llm: the app is vLLM's own OpenAI server app, so what it relies on must exist in the locked vLLM.

Without an engine (seconds, no Ray): every pinned module path of ``VLLM_API`` imports (a vLLM upgrade
that moves one fails here, naming it); the app args become the namespace ``vllm serve --config`` would
parse, and vLLM's own parser and checks refuse bad frontend/engine options with vLLM's message.
"""

from __future__ import annotations

import json

import pytest

from tests.serve_apps.models import run_in_runtime

DRIVER = r"""
import json, sys
from llm.app import LLMArgs
from llm.vllm_options import VLLM_API, vllm_api, vllm_namespace

out = {"pinned": {}, "refused": {}}
for name, path in VLLM_API.items():
    try:
        vllm_api(name)
        out["pinned"][name] = "ok"
    except ImportError as exc:
        out["pinned"][name] = str(exc)

args = LLMArgs(model=sys.argv[1], served_model_name="tiny", default_max_tokens=32,
               engine_args={"max_model_len": 512, "dtype": "bfloat16"},
               frontend_args={"response_role": "bot", "max_log_len": 10, "enable_auto_tool_choice": True,
                              "tool_call_parser": "hermes", "chat_template": "{{ messages[0]['content'] }}"})
ns = vllm_namespace(args.model, args.served_model_name, args.vllm_options())
out["ns"] = {k: getattr(ns, k) for k in ("model", "served_model_name", "max_model_len", "dtype", "response_role",
             "max_log_len", "enable_auto_tool_choice", "tool_call_parser", "override_generation_config", "chat_template")}
bad = {
    "unknown_engine_arg": {"engine_args": {"max_model_lenn": 3}},
    "bad_choice": {"engine_args": {"dtype": "fp99"}},
    "auto_tools_without_parser": {"frontend_args": {"enable_auto_tool_choice": True}},
    "unknown_tool_parser": {"frontend_args": {"enable_auto_tool_choice": True, "tool_call_parser": "nope"}},
    "both_places": {"engine_args": {"max_log_len": 1}, "frontend_args": {"max_log_len": 1}},
}
for name, extra in bad.items():
    try:
        a = LLMArgs(model=sys.argv[1], served_model_name="tiny", **extra)
        vllm_namespace(a.model, a.served_model_name, a.vllm_options())
        out["refused"][name] = None
    except ValueError as exc:
        out["refused"][name] = str(exc)
try:
    LLMArgs(model="m", served_model_name="t", stream_coalesce_ms=2)
    out["unknown_app_arg"] = None
except ValueError as exc:
    out["unknown_app_arg"] = str(exc)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def seen() -> dict:
    import os

    model = os.environ.get("RAYLIFT_TINY_MODEL")
    if not model:
        from tests.fixtures.local_stack import tiny_model_path

        model = str(tiny_model_path())
    proc = run_in_runtime(DRIVER, model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_pinned_vllm_path_exists_in_the_locked_version(seen: dict) -> None:
    moved = {k: v for k, v in seen["pinned"].items() if v != "ok"}
    assert not moved, moved


def test_app_args_become_vllm_serves_own_namespace(seen: dict) -> None:
    ns = seen["ns"]
    assert ns["served_model_name"] == ["tiny"] and ns["max_model_len"] == 512 and ns["dtype"] == "bfloat16"
    assert ns["response_role"] == "bot" and ns["max_log_len"] == 10
    assert ns["enable_auto_tool_choice"] is True and ns["tool_call_parser"] == "hermes"
    assert ns["override_generation_config"] == {"max_new_tokens": 32}  # default_max_tokens, vLLM's way
    assert ns["chat_template"] == "{{ messages[0]['content'] }}"


def test_vllm_refuses_bad_options_with_its_own_message(seen: dict) -> None:
    refused = seen["refused"]
    assert "unrecognized arguments: --max-model-lenn" in refused["unknown_engine_arg"]
    assert "invalid choice: 'fp99'" in refused["bad_choice"]
    assert "--enable-auto-tool-choice requires --tool-call-parser" in refused["auto_tools_without_parser"]
    assert "invalid tool call parser: nope" in refused["unknown_tool_parser"]
    assert "set in both engine_args and frontend_args" in refused["both_places"]
    assert "stream_coalesce_ms" in seen["unknown_app_arg"]
