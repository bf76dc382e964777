"""Redeploys per cluster: the conf each cluster replays, and why a cluster is skipped.

Real stores (LocalStore folders), clusters as Airflow connections (``AIRFLOW_CONN_*``, read by Airflow's own
lookup), the tasks as the parsed raylift_redeploy DAG declares them (its mapped operators unmapped and rendered
as a worker does), a deploy's record written by the real RunRecordOperator and a teardown by the real
TeardownOperator. Triggering events are built with the Task SDK's own accessor and event model.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from raylift.config import STAGED_MODEL_ALIAS
from raylift.errors import RedeployError
from raylift.operators.cluster import TeardownOperator
from raylift.operators.record import RunRecordOperator
from raylift.operators.redeploy import LastGoodConfOperator, paused_key
from raylift.release.state import DeploymentState, run_file, run_key
from raylift.store import LocalStore
from tests.test_redeploy_schedule import load_redeploy_dag

GOOD_PARAMS = {
    "target": "local",
    "target_options": {},
    "model_source": "/models/tiny",
    "model_id": "test/tiny",
    "revision": "",
    "served_name": "tiny-test",
    "replicas": 2,
    "workers": 1,
    "concurrency": [1, 4],
}
CONFIG = {"applications": [{"name": "llm", "import_path": "serve_apps.llm:app"}]}
# what every replay adds: nobody is there to approve a scheduled release (raylift.config.SCHEDULED_ON_INCONCLUSIVE)
SCHEDULED = {"on_inconclusive": "pass"}
PASSED = {"artifact": {"uri": "a"}, "model": {"uri": "m"}, "deployed": {"endpoint": "e", "serve_config": CONFIG},
          "smoke": {"ok": True}, "benchmark": {"overall": {}}, "promote": {"promoted": True}}
# what each step of a passing raylift_deploy returned; and what its gate decided (the run's release.json)
PROMOTED = {"action": "promote", "verdict": "pass"}


class XComs:
    """A task instance with nothing to pull: the record gets the steps' XComs as its ``parts``."""

    def xcom_pull(self, *, task_ids: str, key: str) -> Any:
        raise AssertionError(f"pulled {task_ids}/{key} by task id")


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    return tmp_path


@pytest.fixture()
def store(home: Path) -> LocalStore:
    """The connection-less local target's store (RAYLIFT_HOME/model-store)."""
    return LocalStore(home / "model-store")


def add_cluster(monkeypatch: pytest.MonkeyPatch, home: Path, conn_id: str, port: int, *,
                redeploy: bool = True) -> LocalStore:
    """A ``ray`` cluster as an Airflow connection, with its own model store; returns that store."""
    store_dir = home / f"{conn_id}-store"
    conn = {"conn_type": "raylift_cluster", "extra": {
        "kind": "ray", "dashboard_url": f"http://127.0.0.1:{port}", "serve_url": f"http://127.0.0.1:{port + 1}",
        "model_store": str(store_dir), "redeploy": redeploy}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    return LocalStore(store_dir)


@pytest.fixture()
def clusters(home: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, LocalStore]:
    return {"dev": add_cluster(monkeypatch, home, "dev", 18265), "prod": add_cluster(monkeypatch, home, "prod", 28265)}


def deploy(conn_id: str | None, run_id: str, params: dict[str, Any], parts: dict[str, Any] = PASSED) -> None:
    """What a raylift_deploy run on the cluster leaves: the benchmark's last good (when it passed) and the run
    record, written by the real RunRecordOperator (which also resumes paused redeploys when the run passed)."""
    op = RunRecordOperator(task_id="run_record", parts=parts, target="local", cluster_conn_id=conn_id)
    if parts is PASSED:
        state = op.state_for("llm")
        state.record_good(run_id, CONFIG)
        state.store.write_json(run_file(run_id, "release"), PROMOTED)
    op.execute({"ti": XComs(), "run_id": run_id, "params": {**params, "cluster_conn_id": conn_id}})


def context(dag: Any, events: list[Any] | None = None, **params: Any) -> dict[str, Any]:
    from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

    return {"params": {**dag.params.dump(), **params}, "run_id": "scheduled__2026-03-01T03:00:00+00:00",
            "dag": dag, "triggering_asset_events": TriggeringAssetEventsAccessor.build(events or [])}


def unmapped(dag: Any, task_id: str, mapped_kwargs: dict[str, Any], ctx: dict[str, Any]) -> tuple[Any, str]:
    """The task ``task_id`` of ``dag`` for one map index, rendered as ``MappedOperator.render_template_fields`` does
    in a worker (the values it was expanded over are not templates), and the map index it shows in the UI."""
    mapped = dag.get_task(task_id)
    op = mapped.unmap(mapped_kwargs)
    ctx["task"] = op
    op._do_render_template_fields(parent=op, template_fields=mapped.template_fields, context=ctx,
                                  jinja_env=dag.get_template_env(), seen_oids={id(v) for v in mapped_kwargs.values()})
    return op, dag.get_template_env().from_string(mapped.map_index_template).render(ctx)


def last_good_conf(cluster: str | None, events: list[Any] | None = None, **params: Any) -> dict[str, Any]:
    """One mapped ``last_good_conf`` task of the parsed DAG, for ``cluster``, rendered and run as a worker does;
    the map index it shows is checked to name the cluster."""
    dag = load_redeploy_dag()
    ctx = context(dag, events, **params)
    op, map_index = unmapped(dag, "last_good_conf", {"cluster_conn_id": cluster}, ctx)
    assert map_index == (cluster or "local")
    return op.execute(ctx)


def staged_event(model_id: str, revision: str, location: Path | str, at: datetime) -> Any:
    from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult

    return AssetEventDagRunReferenceResult(
        asset={"name": f"file://{location}", "uri": f"file://{location}", "extra": {}},
        extra={"model_id": model_id, "revision": revision, "uri": str(location), "manifest_uri": f"{location}/m"},
        source_task_id="stage_model",
        source_dag_id="raylift_stage_model",
        source_run_id="r1",
        source_map_index=-1,
        source_aliases=[{"name": STAGED_MODEL_ALIAS}],
        timestamp=at,
    )


# -- per cluster ------------------------------------------------------------------------------------------------------
def test_each_cluster_replays_its_own_last_good_params(clusters: dict[str, LocalStore]) -> None:
    dev_params = {**GOOD_PARAMS, "served_name": "tiny-dev", "replicas": 1}
    prod_params = {**GOOD_PARAMS, "served_name": "tiny-prod", "replicas": 3, "workers": 2}
    deploy("dev", "manual__dev1", dev_params)
    deploy("prod", "manual__prod1", prod_params)

    confs = {name: last_good_conf(name) for name in ("dev", "prod")}
    assert confs["dev"] == dev_params | {"cluster_conn_id": "dev"} | SCHEDULED
    assert confs["prod"] == prod_params | {"cluster_conn_id": "prod"} | SCHEDULED

    # each conf is its own raylift_deploy run, its run id naming the cluster
    dag = load_redeploy_dag()
    run_ids = {}
    for name, conf in confs.items():
        trigger, map_index = unmapped(dag, "run_raylift_deploy", {"conf": conf}, context(dag))
        assert trigger.conf == conf and trigger.trigger_dag_id == "raylift_deploy" and map_index == name
        run_ids[name] = trigger.trigger_run_id
    assert run_ids == {"dev": "redeploy__scheduled__2026-03-01T03:00:00+00:00__dev",
                       "prod": "redeploy__scheduled__2026-03-01T03:00:00+00:00__prod"}


def test_the_replay_names_the_cluster_whose_state_it_read(clusters: dict[str, LocalStore]) -> None:
    """A record without the connection id (written before connections, or by hand) still lands on its cluster."""
    deploy("prod", "manual__prod1", GOOD_PARAMS)
    record_key = f"{run_key('manual__prod1')}/record.json"
    record = clusters["prod"].read_json(record_key)
    clusters["prod"].write_json(record_key, {**record, "params": GOOD_PARAMS})
    assert last_good_conf("prod")["cluster_conn_id"] == "prod"


def test_a_connection_with_redeploy_false_is_skipped(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    add_cluster(monkeypatch, home, "staging", 38265, redeploy=False)
    deploy("staging", "manual__s1", GOOD_PARAMS)
    with pytest.raises(AirflowSkipException, match=r"cluster 'staging': its connection has redeploy false"):
        last_good_conf("staging")


def test_a_cluster_without_a_last_good_run_is_skipped(clusters: dict[str, LocalStore]) -> None:
    deploy("dev", "manual__dev1", GOOD_PARAMS)
    with pytest.raises(AirflowSkipException, match=r"cluster 'prod': nothing to redeploy.*Run raylift_deploy once"):
        last_good_conf("prod")
    assert last_good_conf("dev")["cluster_conn_id"] == "dev"


def test_teardown_pauses_a_clusters_redeploys_until_a_deploy_passes(clusters: dict[str, LocalStore]) -> None:
    deploy("dev", "manual__dev1", GOOD_PARAMS)
    deploy("prod", "manual__prod1", GOOD_PARAMS)
    TeardownOperator(task_id="teardown", target="local", cluster_conn_id="prod").execute(
        {"run_id": "manual__teardown1", "params": {}}
    )
    keys = [k for k in clusters["prod"].list("_raylift") if k.endswith("redeploys_paused.json")]
    assert len(keys) == 1 and keys[0].startswith("_raylift/prod@")
    assert clusters["prod"].read_json(keys[0])["paused_by"]["run_id"] == "manual__teardown1"

    for _ in range(2):  # every scheduled run skips it, naming the teardown and how to resume
        with pytest.raises(AirflowSkipException, match=r"cluster 'prod': redeploys are paused since raylift_teardown "
                           r"run 'manual__teardown1'.*Run raylift_deploy on this cluster to resume"):
            last_good_conf("prod")
    assert last_good_conf("dev")["cluster_conn_id"] == "dev"  # the other cluster is not paused

    failed = {**PASSED, "benchmark": None}  # a deploy that did not pass keeps the pause
    deploy("prod", "manual__prod2", GOOD_PARAMS, parts=failed)
    with pytest.raises(AirflowSkipException, match=r"redeploys are paused"):
        last_good_conf("prod")

    deploy("prod", "manual__prod3", {**GOOD_PARAMS, "replicas": 4})  # passes: redeploys resume
    assert not clusters["prod"].exists(keys[0])
    assert last_good_conf("prod") == GOOD_PARAMS | {"replicas": 4, "cluster_conn_id": "prod"} | SCHEDULED


def test_a_staged_model_reaches_only_the_clusters_of_its_store(clusters: dict[str, LocalStore]) -> None:
    deploy("dev", "manual__dev1", GOOD_PARAMS)
    deploy("prod", "manual__prod1", GOOD_PARAMS)
    location = Path(clusters["prod"].uri) / "test--tiny" / "v2"
    event = staged_event("test/tiny", "v2", location, datetime.now(UTC))

    conf = last_good_conf("prod", [event])
    assert conf == GOOD_PARAMS | {"cluster_conn_id": "prod", "model_source": str(location), "revision": "v2"} | SCHEDULED
    with pytest.raises(AirflowSkipException, match=r"cluster 'dev': the model\(s\) that started this run were staged "
                       rf"in \['{location}'\], not in this cluster's model store {clusters['dev'].uri}"):
        last_good_conf("dev", [event])


def test_each_cluster_takes_the_newest_model_staged_in_its_own_store(clusters: dict[str, LocalStore]) -> None:
    deploy("dev", "manual__dev1", GOOD_PARAMS)
    deploy("prod", "manual__prod1", GOOD_PARAMS)
    now = datetime.now(UTC)
    dev_model = Path(clusters["dev"].uri) / "test--tiny" / "v3"
    events = [staged_event("test/tiny", "v3", dev_model, now - timedelta(minutes=1)),
              staged_event("test/tiny", "v4", "s3://elsewhere/models/test--tiny/v4", now)]
    assert last_good_conf("dev", events)["revision"] == "v3"
    with pytest.raises(AirflowSkipException, match=r"cluster 'prod': the model\(s\)"):
        last_good_conf("prod", events)


# -- the connection-less target (local, as make demo runs it) ---------------------------------------------------------
def record_good_run(store: LocalStore, run_id: str, params: dict[str, Any]) -> None:
    """What a passing raylift_deploy on local (no connection) leaves behind: last_good.json and record.json."""
    DeploymentState(store, "local", "llm").record_good(run_id, {"applications": [{"name": "llm"}]})
    store.write_json(f"{run_key(run_id)}/record.json", {"run_id": run_id, "params": params})


def test_replays_the_params_of_the_last_good_run(store: LocalStore) -> None:
    record_good_run(store, "manual__1", {**GOOD_PARAMS, "not_a_param": "dropped"})
    assert last_good_conf(None) == GOOD_PARAMS | {"cluster_conn_id": None} | SCHEDULED


def test_a_staged_model_event_swaps_in_the_newest_announced_model(store: LocalStore) -> None:
    record_good_run(store, "manual__1", GOOD_PARAMS)
    now = datetime.now(UTC)
    v1, v2 = (Path(store.uri) / "test--tiny" / rev for rev in ("v1", "v2"))
    conf = last_good_conf(None, [staged_event("test/tiny", "v2", v2, now),
                                 staged_event("test/tiny", "v1", v1, now - timedelta(minutes=5))])
    swapped = {"model_source": str(v2), "model_id": "test/tiny", "revision": "v2", "cluster_conn_id": None}
    assert conf == GOOD_PARAMS | swapped | SCHEDULED


def test_nothing_to_redeploy_is_skipped_saying_what_to_do(store: LocalStore) -> None:
    with pytest.raises(AirflowSkipException, match=r"target 'local': nothing to redeploy, no raylift_deploy run of "
                       r"app 'llm' on it") as exc:
        last_good_conf(None)
    assert "Run raylift_deploy once first." in str(exc.value)


def test_local_teardown_pauses_the_demo_cron_too(store: LocalStore) -> None:
    record_good_run(store, "manual__1", GOOD_PARAMS)
    # RAYLIFT_HOME is this test's folder: the local teardown finds no node of its own to stop
    TeardownOperator(task_id="teardown", target="local").execute({"run_id": "manual__teardown1"})
    assert store.exists(paused_key("local"))
    with pytest.raises(AirflowSkipException, match=r"target 'local': redeploys are paused"):
        last_good_conf(None)


def test_a_last_good_run_without_its_record_is_refused(store: LocalStore) -> None:
    DeploymentState(store, "local", "llm").record_good("manual__9", {"applications": []})
    with pytest.raises(RedeployError, match=r"'manual__9' has no run record"):
        last_good_conf(None)


def test_params_the_record_redacted_are_not_replayed(store: LocalStore) -> None:
    record_good_run(store, "manual__1", {**GOOD_PARAMS, "target_options": {"kms_key_id": "***"}})
    with pytest.raises(RedeployError, match=r"hides target_options\.kms_key_id"):
        last_good_conf(None)


def test_direct_use_keeps_working(store: LocalStore) -> None:
    """The operator on its own (not mapped), as other DAGs may use it."""
    record_good_run(store, "manual__1", GOOD_PARAMS)
    op = LastGoodConfOperator(task_id="last_good_conf", target="local", app_name="llm")
    assert op.execute({}) == GOOD_PARAMS | {"cluster_conn_id": None} | SCHEDULED
