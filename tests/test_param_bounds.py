"""Params that become file names or a child's argv are bounded where they are checked, with a clear message.

Issue 57: a long ``model_id`` failed mid-run with the OS's ``ENAMETOOLONG`` (a path segment over 255 bytes), and a
large ``engine_args`` with ``E2BIG`` (one argv string over Linux's MAX_ARG_STRLEN, 128 KiB, where the engine-args
check hands them to ``python -m llm.check_args``). Now: the trigger form / REST API refuses them (Airflow validates
Params against their JSON schema before a run is created), and the deploy step refuses what reaches it another way
before anything is applied.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raylift.errors import ModelSourceError, RayliftValueError
from raylift.serve.config import load_config
from raylift.serve.render import ARGS_MAX_BYTES, deploy_app
from raylift.staging.sources import MODEL_ID_SEGMENT_MAX_BYTES, model_id_from_source

ROOT = Path(__file__).resolve().parents[1]


def validated(**given: object) -> dict:
    from airflow.sdk.definitions.param import ParamsDict

    from raylift.dag_params import deploy_params

    params = ParamsDict(deploy_params())
    params.update(given)
    return params.validate()


@pytest.mark.parametrize("model_id", ["m" * 257, "org/" + "m" * 129, "a//b"])
def test_the_params_refuse_a_model_id_too_long_for_a_file_name(model_id: str) -> None:
    with pytest.raises(Exception, match="param model_id"):
        validated(model_id=model_id)


def test_the_params_take_a_hub_length_model_id() -> None:
    long_ok = "org-" + "o" * 92 + "/" + "n" * 96  # the hub's own limit: 96 characters a part
    assert validated(model_id=long_ok)["model_id"] == long_ok


def test_a_model_named_by_a_source_too_long_for_a_file_name_asks_for_the_param() -> None:
    with pytest.raises(ModelSourceError, match=rf"{MODEL_ID_SEGMENT_MAX_BYTES} bytes.*set the 'model_id' Param"):
        model_id_from_source("/data/" + "é" * 150)  # 300 bytes: mkdir would fail with ENAMETOOLONG


def render(engine_args: dict, app_args: dict | None = None) -> dict:
    return deploy_app(load_config(ROOT / "serve_apps/configs/llm-cpu.yaml"), "cpu", app_name="llm",
                      working_dir="file:///a.zip", model_uri="/m", served_name="m", replicas=1,
                      engine_args=engine_args, app_args=app_args or {}, autoscaling={}, route_prefix=None)


@pytest.mark.parametrize("field", ["engine_args", "app_args"])
def test_args_larger_than_the_bound_are_refused_naming_the_param(field: str) -> None:
    big = {"chat_template": "x" * ARGS_MAX_BYTES}
    with pytest.raises(RayliftValueError, match=rf"'{field}' is {len(json.dumps(big))} bytes as JSON.*64 KiB"):
        render(big) if field == "engine_args" else render({}, big)


def test_args_within_the_bound_render() -> None:
    args = {"chat_template": "x" * (ARGS_MAX_BYTES - 100)}
    assert render(args)["args"]["engine_args"]["chat_template"] == args["chat_template"]
