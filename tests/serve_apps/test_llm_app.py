"""serve_apps/llm: the app is vLLM's own OpenAI server app, so what it relies on must exist in the locked vLLM.

Without an engine (seconds, no Ray): every name of ``VLLM_API`` imports from the locked vLLM, and from its
newest path (the one this vLLM's wheel has: the older paths are for the Neuron image's vLLM 0.9.1, checked
against that wheel by tests/images/test_image_vllm_wheels.py); the app args become the namespace
``vllm serve --config`` would parse, and vLLM's own parser and checks refuse bad frontend/engine options
with vLLM's message. The lookup layer itself (first present path wins, a broken module is never skipped,
calls by parameter name) is tested here on stand-in modules, without vLLM.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.serve_apps.models import run_in_runtime

DRIVER = r"""
import json, sys
from llm.app import LLMArgs
from llm.vllm_options import VLLM_API, vllm_api, vllm_api_path, vllm_namespace

out = {"pinned": {}, "picked": {}, "refused": {}}
for name in VLLM_API:
    try:
        vllm_api(name)
        out["pinned"][name] = "ok"
    except ImportError as exc:
        out["pinned"][name] = str(exc)
    out["picked"][name] = vllm_api_path(name)

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
        from tests.harness.local_stack import tiny_model_path

        model = str(tiny_model_path())
    proc = run_in_runtime(DRIVER, model)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_pinned_vllm_path_exists_in_the_locked_version(seen: dict) -> None:
    moved = {k: v for k, v in seen["pinned"].items() if v != "ok"}
    assert not moved, moved


def test_the_locked_vllm_gets_the_newest_path_of_every_name(seen: dict) -> None:
    """On the locked vLLM (0.32) the layer picks exactly the paths the app imported before it had one."""
    newest = {name: paths[0] for name, paths in _vllm_options().VLLM_API.items()}
    assert seen["picked"] == newest


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


# -- the lookup layer, on stand-in modules (no vLLM) -------------------------------------------------
def _vllm_options() -> ModuleType:
    """serve_apps/llm/vllm_options.py (standard library only at import time), loaded by path."""
    from raylift.config import repo_root

    name = "raylift_test_llm_vllm_options"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, repo_root() / "serve_apps" / "llm" / "vllm_options.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.fixture()
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A package ``fakevllm`` with an old module layout (``old.py``) and a module that fails to import."""
    pkg = tmp_path / "fakevllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "old.py").write_text(
        "def build_app(args, vllm_config=None):\n    return ('old', args, vllm_config)\n"
        "def needs_more(args, surprise):\n    return None\n"
    )
    (pkg / "broken.py").write_text("import fakevllm_dependency_not_installed\nbuild_app = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    options = _vllm_options()
    yield options
    for mod in [m for m in sys.modules if m == "fakevllm" or m.startswith("fakevllm.")]:
        del sys.modules[mod]


def test_lookup_takes_the_first_path_the_running_vllm_has(fake_vllm: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(fake_vllm.VLLM_API, "build_app", ("fakevllm.new.app:build_app", "fakevllm.old:build_app"))
    assert fake_vllm.vllm_api_path("build_app") == "fakevllm.old:build_app"
    assert fake_vllm.vllm_api("build_app")("ns") == ("old", "ns", None)


def test_lookup_names_every_path_when_none_is_there(fake_vllm: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(fake_vllm.VLLM_API, "gone", ("fakevllm.new:gone", "fakevllm.old:gone"))
    with pytest.raises(ImportError, match=r"fakevllm\.new:gone .*fakevllm\.old:gone \(no gone in fakevllm\.old\)"):
        fake_vllm.vllm_api("gone")
    assert fake_vllm.vllm_api("gone", optional=True) is None


def test_lookup_never_skips_a_module_that_is_there_but_broken(
    fake_vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(fake_vllm.VLLM_API, "build_app", ("fakevllm.broken:build_app", "fakevllm.old:build_app"))
    with pytest.raises(ModuleNotFoundError, match="fakevllm_dependency_not_installed"):
        fake_vllm.vllm_api("build_app")


def test_calls_by_parameter_name_pass_what_the_signature_names(
    fake_vllm: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(fake_vllm.VLLM_API, "build_app", ("fakevllm.old:build_app",))
    supplied = {"args": "ns", "supported_tasks": ("generate",), "model_config": "mc"}
    assert fake_vllm.call_vllm("build_app", supplied) == ("old", "ns", None)  # the others: not its parameters
    monkeypatch.setitem(fake_vllm.VLLM_API, "build_app", ("fakevllm.old:needs_more",))
    with pytest.raises(TypeError, match="needs 'surprise', which the LLM app cannot supply"):
        fake_vllm.call_vllm("build_app", supplied)
    with pytest.raises(ValueError, match="not in CALL_ARGS"):
        fake_vllm.call_vllm("build_app", {"state": None})
