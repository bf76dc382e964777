"""raylift_redeploy's schedule comes from one place (raylift.config), overridable by an Airflow Variable."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from raylift.assets import staged_model_alias
from raylift.config import DEFAULT_REDEPLOY_CRON, REDEPLOY_CRON_VARIABLE, redeploy_cron

ROOT = Path(__file__).resolve().parents[1]
ENV_VARIABLE = f"AIRFLOW_VAR_{REDEPLOY_CRON_VARIABLE.upper()}"


def load_redeploy_dag():
    sys.path.insert(0, str(ROOT / "dags"))
    try:
        import raylift_redeploy

        return importlib.reload(raylift_redeploy).dag
    finally:
        sys.path.remove(str(ROOT / "dags"))


def test_default_cron_without_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VARIABLE, raising=False)
    assert redeploy_cron() == DEFAULT_REDEPLOY_CRON


def test_parsing_the_dag_never_asks_the_metadata_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schedule is fixed at parse time; the DAG processor parses every file every 30 s, so the cron must not
    cost a Variable lookup (an API call to the metadata store) per parse."""
    from airflow.sdk import Variable

    asked: list[str] = []
    monkeypatch.setattr(Variable, "get", staticmethod(lambda key, *a, **k: asked.append(key)))
    monkeypatch.setenv(ENV_VARIABLE, "15 1 * * *")
    assert load_redeploy_dag().timetable.timetable.expression == "15 1 * * *"
    assert asked == [], f"Variable.get called while parsing: {asked}"


def test_variable_overrides_the_cron_and_the_dag_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VARIABLE, " 30 2 * * 1 ")
    assert redeploy_cron() == "30 2 * * 1"
    dag = load_redeploy_dag()
    assert dag.timetable.timetable.expression == "30 2 * * 1"
    assert dag.timetable.asset_condition == staged_model_alias()
    assert dag.catchup is False and dag.max_active_runs == 1
