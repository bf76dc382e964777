"""Schedule entry points, against the running Airflow: the cron redeploy and the staged-model Asset.

raylift_redeploy runs on a cron (Airflow Variable, here overridden through the env backend) or on the
``raylift-staged-model`` alias. A real raylift_stage_model run announces the model; the scheduler starts
raylift_redeploy, which runs raylift_deploy with the last good Params and the announced model (held queued
by a deploy freeze here, so the suite starts vLLM once) and ends as that run ends.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from tests.entrypoints.conftest import TEST_REDEPLOY_CRON, deploy_conf
from tests.fixtures.airflow_server import AirflowServer

pytestmark = pytest.mark.integration

REDEPLOY_END_S = 90  # the redeploy polls its raylift_deploy run every 10 s


def next_leap_day_4am(now: datetime) -> datetime:
    """When ``0 4 29 2 *`` fires next (UTC)."""
    year = now.year
    while True:
        try:
            candidate = datetime(year, 2, 29, 4, tzinfo=UTC)
        except ValueError:
            candidate = None
        if candidate and candidate > now:
            return candidate
        year += 1


def test_redeploy_dag_is_on_the_configured_cron_and_the_staged_model_alias(airflow: AirflowServer) -> None:
    details = airflow.ok("GET", "/dags/raylift_redeploy/details")
    assert details["timetable_summary"] == f"Asset or {TEST_REDEPLOY_CRON}"
    assert details["timetable_description"].startswith("Triggered by assets or At 04:00, on day 29")
    assert details["asset_expression"] == {"alias": {"name": "raylift-staged-model", "group": "asset"}}
    assert details["catchup"] is False and details["max_active_runs"] == 1
    expected = next_leap_day_4am(datetime.now(UTC))
    assert datetime.fromisoformat(details["next_dagrun_run_after"].replace("Z", "+00:00")) == expected


@pytest.mark.timeout(1500)  # needs the one real deploy (shared fixture; started here if run alone)
def test_staged_model_event_starts_a_redeploy_of_the_last_good_params(
    airflow: AirflowServer, deployed: dict[str, Any]
) -> None:
    for dag_id in ("raylift_redeploy", "raylift_stage_model"):
        airflow.unpause(dag_id)
    # A deploy freeze (raylift_deploy paused) holds the redeploy's run of it queued: the test sees the run
    # and its conf without a second vLLM start (the REST test already proves a deploy to success).
    airflow.set_paused("raylift_deploy", True)
    try:
        _stage_and_check_the_redeploy(airflow, deployed)
    finally:
        airflow.set_paused("raylift_deploy", False)


def _stage_and_check_the_redeploy(airflow: AirflowServer, deployed: dict[str, Any]) -> None:
    conf = {k: deploy_conf()[k] for k in ("target", "model_source", "model_id")}
    resp = airflow.trigger("raylift_stage_model", conf, run_id="stage_for_redeploy")
    assert resp.status_code == 200, resp.text
    staged = airflow.wait_run("raylift_stage_model", "stage_for_redeploy", timeout_s=120)
    assert staged["state"] == "success", airflow.failure_report("raylift_stage_model", "stage_for_redeploy")

    # The event names the model's place in the store, and the scheduler made a raylift_redeploy run of it.
    def event_with_run() -> dict[str, Any] | None:
        params = {"source_dag_id": "raylift_stage_model"}
        resp = airflow.api("GET", "/assets/events", params=params)
        if resp.status_code == 500 and "start_date" in airflow.log_path.read_text(errors="replace")[-20000:]:
            # Airflow 3's AssetEventResponse cannot serialise a created run that is still queued
            # (start_date None: "created_dagruns.0.start_date Input should be a valid datetime"); once
            # the scheduler starts that run, a second later, the same request answers.
            return None
        assert resp.status_code == 200, resp.text[:1000]
        return next((e for e in resp.json()["asset_events"] if e["created_dagruns"]), None)

    event = airflow.wait_for("the asset event's raylift_redeploy run", event_with_run, timeout_s=60)
    (store_dir,) = (airflow.stack.home / "model-store/test--tiny-llama/local").glob("sha256-*")  # content folder
    assert event["uri"] == f"file://{store_dir}"
    assert event["extra"] == {
        "model_id": "test/tiny-llama",
        "revision": "local",
        "uri": str(store_dir),
        "manifest_uri": str(store_dir / "raylift-manifest.json"),
    }
    (created,) = event["created_dagruns"]
    assert created["dag_id"] == "raylift_redeploy"
    redeploy_id = created["run_id"]
    assert airflow.run("raylift_redeploy", redeploy_id)["run_type"] == "asset_triggered"

    # The redeploy runs raylift_deploy with the last good Params and the announced model.
    deploy_id = f"redeploy__{redeploy_id}__local"
    airflow.wait_for(
        "the raylift_deploy run of the redeploy",
        lambda: airflow.api("GET", airflow.run_path("raylift_deploy", deploy_id)).status_code == 200,
        timeout_s=120,
    )
    run = airflow.run("raylift_deploy", deploy_id)
    assert run["run_type"] == "operator_triggered" and run["state"] == "queued", run
    announced = {"model_source": str(store_dir), "model_id": "test/tiny-llama", "revision": "local"}
    # the replay is of the last good run's Params (another entry-point test, the approval's, may have released
    # since the package's first deploy); a re-baseline is the one-off choice of the run that made it
    import json

    from raylift.release.state import run_key

    store = airflow.stack.home / "model-store"
    good = json.loads((store / "_raylift/local/llm/last_good.json").read_text())
    params = json.loads((store / run_key(good["run_id"]) / "record.json").read_text())["params"]
    expected = {k: params[k] for k in deployed["conf"] if k != "regression_baseline"} | announced
    assert {k: run["conf"].get(k) for k in expected} == expected
    assert "regression_baseline" not in run["conf"]
    assert run["conf"]["on_inconclusive"] == "pass"  # nobody is there to approve a scheduled release: never held
    airflow.wait_for(  # it waits for that run without holding a worker slot
        "the redeploy to defer",
        lambda: airflow.task_states("raylift_redeploy", redeploy_id)["run_raylift_deploy"] == "deferred",
        timeout_s=60,
    )

    # ... and ends as that run ends.
    airflow.fail_run("raylift_deploy", deploy_id)
    finished = airflow.wait_run("raylift_redeploy", redeploy_id, timeout_s=REDEPLOY_END_S)
    assert finished["state"] == "failed", finished
