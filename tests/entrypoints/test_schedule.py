"""Schedule entry points, against the running Airflow: the cron redeploy and the staged-model Asset.

raylift_redeploy runs on a cron (Airflow Variable, here overridden through the env backend) or on the
``raylift-staged-model`` alias. A real raylift_stage_model run announces the model; the scheduler starts
raylift_redeploy, which re-runs raylift_deploy with the last good Params and the announced model.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from raylift.deploy_state import run_key
from tests.entrypoints.conftest import TEST_REDEPLOY_CRON, deploy_conf
from tests.fixtures.airflow_server import AirflowServer

pytestmark = pytest.mark.integration

REDEPLOY_TIMEOUT_S = 300


def next_leap_day_4am(now: datetime) -> datetime:
    """When ``0 4 29 2 *`` fires next (UTC)."""
    year = now.year
    while True:
        try:
            candidate = datetime(year, 2, 29, 4, tzinfo=timezone.utc)
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
    expected = next_leap_day_4am(datetime.now(timezone.utc))
    assert datetime.fromisoformat(details["next_dagrun_run_after"].replace("Z", "+00:00")) == expected


def test_staged_model_event_starts_a_redeploy_of_the_last_good_params(
    airflow: AirflowServer, deployed: dict[str, Any]
) -> None:
    for dag_id in ("raylift_redeploy", "raylift_stage_model"):
        airflow.unpause(dag_id)
    # Same model as the deploy: its files are unchanged, so the redeploy reuses what is serving.
    conf = {k: deploy_conf()[k] for k in ("target", "model_source", "model_id")}
    resp = airflow.trigger("raylift_stage_model", conf, run_id="stage_for_redeploy")
    assert resp.status_code == 200, resp.text
    staged = airflow.wait_run("raylift_stage_model", "stage_for_redeploy", timeout_s=120)
    assert staged["state"] == "success", airflow.failure_report("raylift_stage_model", "stage_for_redeploy")

    # The event names the model's place in the store, and the scheduler made a raylift_redeploy run of it.
    def event_with_run() -> dict[str, Any] | None:
        params = {"source_dag_id": "raylift_stage_model"}
        events = airflow.ok("GET", "/assets/events", params=params)["asset_events"]
        return next((e for e in events if e["created_dagruns"]), None)

    event = airflow.wait_for("the asset event's raylift_redeploy run", event_with_run, timeout_s=60)
    store_dir = airflow.stack.home / "model-store/test--tiny-llama/local"
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

    # The redeploy is a raylift_deploy run: the last good Params, with the announced model.
    deploy_id = f"redeploy__{redeploy_id}"
    airflow.wait_for(
        "the raylift_deploy run of the redeploy",
        lambda: airflow.api("GET", airflow.run_path("raylift_deploy", deploy_id)).status_code == 200,
        timeout_s=90,
    )
    run = airflow.run("raylift_deploy", deploy_id)
    good = deployed["conf"]
    assert run["run_type"] == "operator_triggered"
    assert {k: run["conf"][k] for k in ("served_name", "replicas", "workers", "concurrency")} == {
        k: good[k] for k in ("served_name", "replicas", "workers", "concurrency")
    }
    assert run["conf"]["model_source"] == str(store_dir) and run["conf"]["revision"] == "local"

    # It ran the whole pipeline on the announced model, and the redeploy ends as its deploy run ends.
    finished = airflow.wait_run("raylift_redeploy", redeploy_id, timeout_s=REDEPLOY_TIMEOUT_S)
    deploy_run = airflow.run("raylift_deploy", deploy_id)
    assert finished["state"] == deploy_run["state"], (finished["state"], deploy_run["state"])
    states = airflow.task_states("raylift_deploy", deploy_id)
    report = airflow.failure_report("raylift_deploy", deploy_id)
    assert states["stage_model"] == states["deploy"] == states["smoke_test"] == "success", report
    results = airflow.stack.home / "model-store" / run_key(deploy_id) / "benchmark.json"
    overall = json.loads(results.read_text())["overall"]
    assert overall["output_tokens"] > 0 and overall["errors"] == 0, overall
    if states["benchmark"] != "success":
        # The regression gate compares a handful of requests with the last good run's: on a loaded
        # shared CPU box it can reject (and roll back) a healthy redeploy. That, and nothing else, may fail.
        assert "regressed against baseline" in report and "Rolled back" in report, report
