"""The deploy operator and the cluster sensor defer per Airflow's ``[operators] default_deferrable`` (read when
the task is built, as the providers' operators do); an explicit ``deferrable`` wins."""

from __future__ import annotations

from typing import Any

import pytest

ARTIFACT = {"digest": "x", "working_dir": "file:///x.zip"}
MODEL = {"model_id": "m", "revision": "r", "uri": "/m", "manifest_uri": "/m/x"}


def deploy(**kwargs: Any) -> Any:
    from raylift.operators.deploy import ServeDeployOperator

    return ServeDeployOperator(task_id="deploy", artifact=ARTIFACT, model=MODEL, served_name="s", **kwargs)


def sensor(**kwargs: Any) -> Any:
    from raylift.sensors.cluster import RayClusterReadySensor

    return RayClusterReadySensor(task_id="ready", expectation={"workers": 0}, **kwargs)


@pytest.mark.parametrize("build", [deploy, sensor], ids=["deploy", "sensor"])
@pytest.mark.parametrize("setting", ["True", "False"])
def test_default_follows_airflows_setting(build: Any, setting: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", setting)
    assert build().deferrable is (setting == "True")


@pytest.mark.parametrize("build", [deploy, sensor], ids=["deploy", "sensor"])
def test_an_explicit_value_wins(build: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert build(deferrable=False).deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert build(deferrable=True).deferrable is True


def test_raylift_sets_it_where_it_configures_airflow() -> None:
    """Its own runs keep deferring: tools/airflow_env.sh, docker-compose.yaml and the test stack set it."""
    from tests.harness.local_stack import ROOT

    assert "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE=${AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE:-True}" in (
        ROOT / "tools/airflow_env.sh"
    ).read_text()
    assert 'AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE: "true"' in (ROOT / "docker-compose.yaml").read_text()
    assert '"AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True"' in (ROOT / "tests/harness/local_stack.py").read_text()
