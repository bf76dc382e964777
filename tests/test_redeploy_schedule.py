"""raylift_redeploy's schedule and clusters come from one place (raylift.config), overridable by Airflow Variables
in the DAG processor's environment; each cluster is its own mapped task."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from raylift.assets import staged_model_alias
from raylift.config import (
    DEFAULT_REDEPLOY_CRON,
    REDEPLOY_CLUSTERS_VARIABLE,
    REDEPLOY_CRON_VARIABLE,
    redeploy_clusters,
    redeploy_cron,
)
from raylift.errors import RayliftValueError
from raylift.operators.redeploy import RedeployClustersOperator

ROOT = Path(__file__).resolve().parents[1]
ENV_VARIABLE = f"AIRFLOW_VAR_{REDEPLOY_CRON_VARIABLE.upper()}"
CLUSTERS_VARIABLE = f"AIRFLOW_VAR_{REDEPLOY_CLUSTERS_VARIABLE.upper()}"


def load_redeploy_dag():
    """The DAG as a fresh parse of dags/raylift_redeploy.py builds it: the packaged module it imports is parsed again
    too (the DAG processor parses each file in a new process)."""
    import raylift.dags.redeploy

    sys.path.insert(0, str(ROOT / "dags"))
    try:
        importlib.reload(raylift.dags.redeploy)
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
    monkeypatch.setenv(CLUSTERS_VARIABLE, '["prod"]')
    dag = load_redeploy_dag()
    assert dag.timetable.timetable.expression == "15 1 * * *"
    assert dag.params["clusters"] == ["prod"]
    assert asked == [], f"Variable.get called while parsing: {asked}"


def test_variable_overrides_the_cron_and_the_dag_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VARIABLE, " 30 2 * * 1 ")
    assert redeploy_cron() == "30 2 * * 1"
    dag = load_redeploy_dag()
    assert dag.timetable.timetable.expression == "30 2 * * 1"
    assert dag.timetable.asset_condition == staged_model_alias()
    assert dag.catchup is False and dag.max_active_runs == 1


def test_clusters_default_to_the_connection_less_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, a redeploy considers the connection-less target alone (local: what make demo deploys)."""
    monkeypatch.delenv(CLUSTERS_VARIABLE, raising=False)
    assert redeploy_clusters() == [None]
    assert load_redeploy_dag().params["clusters"] == [None]


def test_the_clusters_variable_names_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CLUSTERS_VARIABLE, ' ["dev", "prod", "dev", null] ')
    assert redeploy_clusters() == ["dev", "prod", None]
    dag = load_redeploy_dag()
    assert dag.params["clusters"] == ["dev", "prod", None]
    dag.params.validate()  # the default satisfies the Param's own schema


@pytest.mark.parametrize("value", ["dev,prod", '{"dev": true}', '["dev", 3]', '[""]'])
def test_a_clusters_variable_that_is_not_a_list_of_ids_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(CLUSTERS_VARIABLE, value)
    with pytest.raises(RayliftValueError, match=rf"{CLUSTERS_VARIABLE}=.* is not a JSON list of raylift_cluster"):
        redeploy_clusters()


def test_a_cluster_param_that_is_not_a_connection_id_is_refused_when_triggering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.sdk.definitions.param import ParamsDict
    from airflow.sdk.exceptions import ParamValidationError

    monkeypatch.delenv(CLUSTERS_VARIABLE, raising=False)
    dag = load_redeploy_dag()
    params = ParamsDict(dag.params)
    params["clusters"] = ["dev", None]
    params.validate()
    with pytest.raises(ParamValidationError, match="does not match"):
        params["clusters"] = ["../dev"]
    with pytest.raises(ParamValidationError, match="non-unique"):
        params["clusters"] = ["dev", "dev"]


def test_each_cluster_is_a_mapped_task_and_each_conf_a_mapped_deploy(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    from raylift.config import default_deferrable

    dag = load_redeploy_dag()
    clusters, confs, deploys = (dag.get_task(t) for t in ("clusters", "last_good_conf", "run_raylift_deploy"))
    assert isinstance(confs, MappedOperator) and isinstance(deploys, MappedOperator)
    assert confs.expand_input.value["cluster_conn_id"].operator is clusters
    assert deploys.expand_input.value["conf"].operator is confs
    kwargs = deploys.partial_kwargs
    assert kwargs["trigger_dag_id"] == "raylift_deploy" and kwargs["wait_for_completion"] is True
    assert kwargs["openlineage_inject_parent_info"] is False
    assert kwargs["deferrable"] is default_deferrable(None)
    assert "cluster_conn_id" in kwargs["trigger_run_id"]
    # a skipped cluster does not skip the others' deploys; any failure still fails the run (its last task)
    assert deploys.trigger_rule == "all_done"
    watcher = dag.get_task("fail_run_if_any_failed")
    assert watcher.trigger_rule == "one_failed" and set(watcher.upstream_task_ids) == {
        "clusters", "last_good_conf", "run_raylift_deploy"}


def test_the_dag_survives_airflow_serialization() -> None:
    """What the DAG processor stores and the scheduler reads back: the mapping and its map-index names."""
    from airflow.serialization.serialized_objects import DagSerialization

    dag = DagSerialization.from_dict(DagSerialization.to_dict(load_redeploy_dag()))
    assert dag.get_task("last_good_conf").map_index_template == "{{ task.cluster_conn_id or task.target }}"
    assert dag.get_task("run_raylift_deploy").partial_kwargs["wait_for_completion"] is True


def test_the_clusters_task_hands_on_each_cluster_once() -> None:
    op = RedeployClustersOperator(task_id="clusters", clusters=["dev", None, "dev", "prod"])
    assert op.execute({}) == ["dev", None, "prod"]
    assert RedeployClustersOperator(task_id="clusters", clusters='["dev"]').execute({}) == ["dev"]
    assert RedeployClustersOperator(task_id="clusters", clusters=[]).execute({}) == []
    with pytest.raises(RayliftValueError, match=r"'clusters' must be a list of raylift_cluster connection ids"):
        RedeployClustersOperator(task_id="clusters", clusters="dev").execute({})
