"""LastGoodConfOperator: the conf a redeploy replays, read from a real state store (a local directory).

Triggering events are built with the Task SDK's own accessor and event model, as a worker receives them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from raylift.config import STAGED_MODEL_ALIAS
from raylift.deploy_state import DeploymentState, run_key
from raylift.errors import RedeployError
from raylift.operators.redeploy import LastGoodConfOperator
from raylift.store import LocalStore

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


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalStore:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path))
    return LocalStore(tmp_path / "model-store")


def record_good_run(store: LocalStore, run_id: str, params: dict[str, Any]) -> None:
    """What a passing raylift_deploy leaves behind: last_good.json and the run's record.json."""
    DeploymentState(store, "local", "llm").record_good(run_id, {"applications": [{"name": "llm"}]})
    store.write_json(f"{run_key(run_id)}/record.json", {"run_id": run_id, "params": params})


def staged_event(model_id: str, revision: str, location: str, at: datetime) -> Any:
    from airflow.sdk.execution_time.comms import AssetEventDagRunReferenceResult

    return AssetEventDagRunReferenceResult(
        asset={"name": f"file://{location}", "uri": f"file://{location}", "extra": {}},
        extra={"model_id": model_id, "revision": revision, "uri": location, "manifest_uri": f"{location}/m"},
        source_task_id="stage_model",
        source_dag_id="raylift_stage_model",
        source_run_id="r1",
        source_map_index=-1,
        source_aliases=[{"name": STAGED_MODEL_ALIAS}],
        timestamp=at,
    )


def run_operator(events: list[Any] | None = None) -> dict[str, Any]:
    from airflow.sdk.execution_time.context import TriggeringAssetEventsAccessor

    op = LastGoodConfOperator(task_id="last_good_conf", target="local", app_name="llm")
    return op.execute({"triggering_asset_events": TriggeringAssetEventsAccessor.build(events or [])})


def test_replays_the_params_of_the_last_good_run(store: LocalStore) -> None:
    record_good_run(store, "manual__1", {**GOOD_PARAMS, "not_a_param": "dropped"})
    assert run_operator() == GOOD_PARAMS


def test_a_staged_model_event_swaps_in_the_newest_announced_model(store: LocalStore) -> None:
    record_good_run(store, "manual__1", GOOD_PARAMS)
    now = datetime.now(UTC)
    conf = run_operator(
        [
            staged_event("test/tiny", "v2", "/store/test--tiny/v2", now),
            staged_event("test/tiny", "v1", "/store/test--tiny/v1", now - timedelta(minutes=5)),
        ]
    )
    swapped = {"model_source": "/store/test--tiny/v2", "model_id": "test/tiny", "revision": "v2"}
    assert conf == GOOD_PARAMS | swapped


def test_nothing_to_redeploy_says_what_to_do(store: LocalStore) -> None:
    with pytest.raises(RedeployError, match=r"no raylift_deploy run of app 'llm' on target 'local'") as exc:
        run_operator()
    assert "Run raylift_deploy once first." in str(exc.value)


def test_a_last_good_run_without_its_record_is_refused(store: LocalStore) -> None:
    DeploymentState(store, "local", "llm").record_good("manual__9", {"applications": []})
    with pytest.raises(RedeployError, match=r"'manual__9' has no run record"):
        run_operator()


def test_params_the_record_redacted_are_not_replayed(store: LocalStore) -> None:
    record_good_run(store, "manual__1", {**GOOD_PARAMS, "target_options": {"kms_key_id": "***"}})
    with pytest.raises(RedeployError, match=r"hides target_options\.kms_key_id"):
        run_operator()
