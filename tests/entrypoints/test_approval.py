"""A held release answered through Airflow's own REST API (issue 26): the gate holds an inconclusive canary at the
standard provider's approval step; one run is approved and promoted, another rejected and its canary removed.

The judge of "held" is Airflow itself: the task instance's state (``awaiting_input``) and its HITL detail, read and
answered with ``PATCH .../taskInstances/approve_release/-1/hitlDetails``; the judge of what serves is Ray Serve's
own REST API. The candidates change one app arg (a restart, so a canary; the same speed), and the gate is set so
that an unchanged speed cannot be decided: tolerance 0 at 99.9 % confidence, the cumulative limit out of the way.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.entrypoints.conftest import deploy_conf
from tests.fixtures.airflow_server import AirflowServer

DEPLOY = "raylift_deploy"
HELD = {
    "release": "canary", "regression_baseline": "last_good", "on_inconclusive": "hold",
    "max_regression": 0.0, "regression_confidence": 0.999, "max_cumulative_regression": 10,
    "requests_per_level": 8, "concurrency": [1], "approval": {"timeout_minutes": 30},
}
RUN_TIMEOUT_S = 900


def serve_apps(airflow: AirflowServer) -> dict[str, Any]:
    resp = httpx.get(f"{airflow.stack.dashboard_url}/api/serve/applications/", timeout=10)
    return dict(resp.json()["applications"])


def held(airflow: AirflowServer, run_id: str, max_tokens: int) -> None:
    """Trigger a canary of ``default_max_tokens`` ``max_tokens`` and wait until Airflow says it awaits input."""
    resp = airflow.trigger(DEPLOY, deploy_conf(**HELD, app_args={"default_max_tokens": max_tokens}), run_id=run_id)
    assert resp.status_code == 200, resp.text

    def awaiting() -> bool:
        states = airflow.task_states(DEPLOY, run_id)
        if states.get("gate") == "failed" or states.get("promote") == "success":
            raise AssertionError(f"the gate did not hold {run_id}: {states}; "
                                 f"{airflow.xcom(DEPLOY, run_id, 'gate', key='decision')}")
        return states.get("approve_release") == "awaiting_input"

    airflow.wait_for(f"{run_id} to await approval", awaiting, timeout_s=RUN_TIMEOUT_S, interval_s=5)
    airflow.wait_worker_reaped(DEPLOY, run_id, "approve_release", "awaiting_input")
    path = f"{airflow.run_path(DEPLOY, run_id)}/taskInstances/approve_release/-1/hitlDetails"
    detail = airflow.ok("GET", path)
    assert detail["options"] == ["Approve", "Reject"] and detail["defaults"] == ["Reject"], detail
    assert "inconclusive" in detail["subject"] and "regression judgement" in detail["body"], detail
    assert "llm-canary" in serve_apps(airflow)  # the candidate runs beside the serving app while it waits


def answer(airflow: AirflowServer, run_id: str, option: str) -> None:
    path = f"{airflow.run_path(DEPLOY, run_id)}/taskInstances/approve_release/-1/hitlDetails"
    resp = airflow.api("PATCH", path, json={"chosen_options": [option]})
    assert resp.status_code == 200, resp.text


@pytest.mark.timeout(2 * RUN_TIMEOUT_S + 600)
def test_a_held_release_is_approved_and_promoted_and_another_rejected_and_removed(
    airflow: AirflowServer, deployed: dict[str, Any]
) -> None:
    held(airflow, "held_approved", 63)
    answer(airflow, "held_approved", "Approve")
    run = airflow.wait_run(DEPLOY, "held_approved", timeout_s=RUN_TIMEOUT_S)
    assert run["state"] == "success", airflow.failure_report(DEPLOY, "held_approved")
    decision = airflow.xcom(DEPLOY, "held_approved", "approve_release")  # its XCom: what promote read
    assert decision["action"] == "promote" and decision["approval"]["answer"] == "Approve", decision
    assert decision["becomes_anchor"] is False  # an approved inconclusive release never becomes the anchor
    apps = serve_apps(airflow)
    assert "llm-canary" not in apps and apps["llm"]["deployed_app_config"]["args"]["default_max_tokens"] == 63

    held(airflow, "held_rejected", 62)
    answer(airflow, "held_rejected", "Reject")
    run = airflow.wait_run(DEPLOY, "held_rejected", timeout_s=RUN_TIMEOUT_S)
    assert run["state"] == "failed", run
    states = airflow.task_states(DEPLOY, "held_rejected")
    assert states["approve_release"] == "failed" and states["promote"] == "upstream_failed", states
    assert states["rollback"] == "success" and states["release_cluster_lease"] == "success", states
    apps = serve_apps(airflow)
    assert "llm-canary" not in apps, sorted(apps)  # the rollback step removed it
    assert apps["llm"]["deployed_app_config"]["args"]["default_max_tokens"] == 63  # the approved one still serves
