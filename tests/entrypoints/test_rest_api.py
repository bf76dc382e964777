"""REST API entry point: trigger raylift_deploy with a conf, poll it to success, read the benchmark from XCom.

The run goes through the real scheduler, executor and triggerer (the deploy task defers), against a real
Ray cluster and vLLM on 127.0.0.1; invalid confs are refused at trigger time by the Params' JSON schema.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN

from raylift.config import REPORTS_URL_PREFIX
from tests.entrypoints.conftest import DEPLOY_RUN_ID, deploy_conf
from tests.fixtures.airflow_server import AirflowServer

pytestmark = pytest.mark.integration


@pytest.mark.timeout(1500)  # includes starting Airflow and the one real deploy (fixtures)
def test_triggered_run_succeeds_and_benchmark_summary_is_in_xcom(
    airflow: AirflowServer, deployed: dict[str, Any]
) -> None:
    assert deployed["conf"]["served_name"] == "tiny-test" and deployed["triggered_by"] == "rest_api"
    states = airflow.task_states("raylift_deploy", DEPLOY_RUN_ID)
    assert states.pop("fail_run_if_any_failed") == "skipped"  # the watcher runs only when a step failed
    assert states.pop("rollback") == "skipped"  # so does the rollback step
    assert states.pop("approve_release") == "skipped"  # the gate promoted: nobody was asked
    assert set(states.values()) == {"success"}, states

    summary = airflow.xcom("raylift_deploy", DEPLOY_RUN_ID, "benchmark")
    overall = summary["overall"]
    assert overall["output_tokens"] > 0, overall
    assert overall["errors"] == 0, overall
    assert [level["concurrency"] for level in summary["levels"]] == [1, 2]
    assert summary["results_uri"].endswith("benchmark.json")

    deployed_app = airflow.xcom("raylift_deploy", DEPLOY_RUN_ID, "deploy")
    assert deployed_app["served_name"] == "tiny-test"
    assert deployed_app["endpoint"].startswith("http://127.0.0.1:")

    # the run record's cold start, against Airflow's own account of the run (its REST API)
    record_uri = airflow.xcom("raylift_deploy", DEPLOY_RUN_ID, "run_record")
    cold = json.loads(Path(record_uri.removeprefix("file://")).read_text())["cold_start"]
    at = {key: datetime.fromisoformat(value) for key, value in cold.items() if key.endswith("_at")}
    assert at["triggered_at"] == datetime.fromisoformat(deployed["run_after"]), (cold, deployed)
    started, ended = (datetime.fromisoformat(deployed[key]) for key in ("start_date", "end_date"))
    assert started < at["running_at"] <= at["first_token_at"] < ended, (cold, deployed)
    assert 0 < cold["trigger_to_running_s"] <= cold["trigger_to_first_token_s"], cold


def test_the_benchmark_report_opens_for_a_signed_in_airflow_user_only(
    airflow: AirflowServer, deployed: dict[str, Any]
) -> None:
    """The benchmark task's extra link, as the UI gets it from the REST API, on the real api-server: Airflow
    authenticates no plugin app, so the reports app asks for Airflow's user itself (token or UI cookie)."""
    links = airflow.ok("GET", f"/dags/raylift_deploy/dagRuns/{DEPLOY_RUN_ID}/taskInstances/benchmark/links")
    link = links["extra_links"]["Benchmark report"]
    # absolute under the api-server's base_url, as the UI opens it
    assert link.startswith(f"{airflow.url}{REPORTS_URL_PREFIX}/runs/") and link.endswith("/benchmark.html"), links
    url = link
    assert httpx.get(url, timeout=30).status_code == 401
    assert httpx.get(url, headers={"Authorization": "Bearer forged"}, timeout=30).status_code == 403
    for credentials in ({"headers": {"Authorization": f"Bearer {airflow.token()}"}},  # POST /auth/token's JWT
                        {"cookies": {COOKIE_NAME_JWT_TOKEN: airflow.token()}}):  # what the UI's login leaves
        page = httpx.get(url, timeout=30, **credentials)
        assert page.status_code == 200 and "TTFT p50" in page.text and "tiny-test" in page.text, page.text[:300]


@pytest.mark.parametrize(
    ("override", "field", "reason"),
    [
        ({"replicas": 0}, "replicas", "0 is less than the minimum of 1"),
        ({"target": "mars"}, "target", "'mars' is not one of"),
        ({"served_name": "has spaces"}, "served_name", "does not match"),
    ],
)
def test_invalid_conf_is_refused_at_trigger_time(
    airflow: AirflowServer, override: dict[str, Any], field: str, reason: str
) -> None:
    before = airflow.ok("GET", "/dags/raylift_deploy/dagRuns")["total_entries"]
    resp = airflow.trigger("raylift_deploy", deploy_conf(**override))
    assert resp.status_code == 400, resp.text
    detail = resp.json()["detail"]
    assert f"Invalid input for param {field}" in detail and reason in detail, detail
    assert airflow.ok("GET", "/dags/raylift_deploy/dagRuns")["total_entries"] == before  # no run was created
