"""Serve config merging: a deploy changes only its own app."""

from __future__ import annotations

from pathlib import Path

import pytest

from raylift.errors import RayliftValueError
from raylift.serve_config import load_config, merge_app, render_app

ROOT = Path(__file__).resolve().parents[1]


def base() -> dict:
    return load_config(ROOT / "serve_apps/configs/llm-cpu.yaml")


def test_render_fills_working_dir_args_and_replicas() -> None:
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={"model": "/m"}, replicas=3)
    assert app["runtime_env"]["working_dir"] == "file:///a.zip"
    assert app["args"]["model"] == "/m" and app["args"]["served_model_name"] == "tiny-llama"
    assert app["deployments"][0]["num_replicas"] == 3


def test_merge_keeps_other_apps_and_replaces_same_name() -> None:
    other = {"name": "translator", "route_prefix": "/translate", "import_path": "t:app"}
    old = render_app(base(), app_name="llm", working_dir="file:///old.zip", args={})
    current = {"applications": [other, old], "http_options": {"host": "127.0.0.1", "port": 9000}}
    new = render_app(base(), app_name="llm", working_dir="file:///new.zip", args={})
    merged = merge_app(current, new, defaults=base())
    assert [a["name"] for a in merged["applications"]] == ["translator", "llm"]
    assert merged["applications"][1]["runtime_env"]["working_dir"] == "file:///new.zip"
    assert merged["http_options"]["port"] == 9000  # the running cluster's options win


def test_route_prefix_clash_is_refused() -> None:
    current = {"applications": [{"name": "other", "route_prefix": "/"}]}
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={})
    with pytest.raises(RayliftValueError, match="route_prefix '/'"):
        merge_app(current, app, defaults=base())


def test_first_deploy_takes_defaults() -> None:
    app = render_app(base(), app_name="llm", working_dir="file:///a.zip", args={})
    merged = merge_app({"applications": []}, app, defaults={**base(), "http_options": {"port": 1234}})
    assert merged["http_options"] == {"port": 1234} and len(merged["applications"]) == 1
