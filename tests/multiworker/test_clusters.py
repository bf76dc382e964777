"""raylift on a multi-worker Airflow (Postgres, Redis, CeleryExecutor, two workers with their own RAYLIFT_HOMEs)
deploying to two Ray clusters named by two raylift_cluster connections, ``dev`` and ``prod``.

The judges are Airflow's REST API (run and task states, where each task ran, XComs), Ray Serve's own REST API on
each cluster (what is deployed), the app's own answers (its ``x-raylift-app-version`` header) and the clusters'
stores as the workers left them. The app is the lightest real one raylift ships: the translator on the tiny T5.
"""

from __future__ import annotations

import re
import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.fixtures.celery_stack import WORKERS, CeleryStack
from tests.multiworker.ray_clusters import RayHead
from tests.serve_apps.models import tiny_t5_path

pytestmark = pytest.mark.timeout(900)

DEPLOY = "raylift_deploy"
RUN_TIMEOUT_S = 600


def conf(cluster: str, version: str, **overrides: Any) -> dict[str, Any]:
    return {
        "cluster_conn_id": cluster,
        "serve_config": "translator-cpu.yaml",
        "app_name": "translator",
        "model_source": str(tiny_t5_path()),
        "model_id": "test/tiny-t5",
        "served_name": "tiny-t5",
        "replicas": 1,
        "workers": 0,
        "app_args": {"version": version},
        "requests_per_level": 4,
        "concurrency": [1],
        # about leases and clusters, not the release gate: applied directly (the translator has no benchmark)
        "release": "direct",
    } | overrides


def serving_version(head: RayHead) -> str:
    resp = httpx.post(f"{head.serve_url}/", json="Hello ECS!", timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.headers["x-raylift-app-version"]


def deployed_version(head: RayHead) -> str:
    app = head.serve_apps()["applications"]["translator"]
    assert app["status"] == "RUNNING", app
    return str(app["deployed_app_config"]["args"]["version"])


def when(ti: dict[str, Any], field: str) -> float:
    return datetime.fromisoformat(ti[field]).timestamp()


@pytest.fixture(scope="module")
def stack(celery_stack: CeleryStack) -> CeleryStack:
    tiny_t5_path()  # generated (and cached) before any run's clock starts
    celery_stack.airflow.wait_dags([DEPLOY, "raylift_redeploy", "raylift_teardown"])
    for dag in (DEPLOY, "raylift_redeploy", "raylift_teardown"):
        celery_stack.airflow.unpause(dag)
    return celery_stack


def run_ok(stack: CeleryStack, dag: str, run_id: str) -> dict[str, Any]:
    run = stack.airflow.wait_run(dag, run_id, timeout_s=RUN_TIMEOUT_S)
    assert run["state"] == "success", stack.airflow.failure_report(dag, run_id)
    return run


def test_two_deploys_of_one_cluster_at_once_are_serialised_by_its_lease(
    stack: CeleryStack, clusters: dict[str, RayHead]
) -> None:
    airflow = stack.airflow
    runs = {"a": "dev_a", "b": "dev_b"}
    for version, run_id in runs.items():  # the same moment, through the REST API
        resp = airflow.trigger(DEPLOY, conf("dev", f"dev-{version}"), run_id=run_id)
        assert resp.status_code == 200, resp.text
    for run_id in runs.values():
        run_ok(stack, DEPLOY, run_id)

    tis = {run_id: {ti["task_id"]: ti for ti in stack.task_instances(DEPLOY, run_id)} for run_id in runs.values()}
    hosts = {ti["hostname"] for run in tis.values() for ti in run.values() if ti.get("hostname")}
    assert hosts == set(WORKERS), f"the two runs' tasks ran on {hosts}"
    held = {run_id: airflow.xcom(DEPLOY, run_id, "acquire_cluster_lease") for run_id in runs.values()}
    first, second = sorted(runs.values(), key=lambda r: held[r]["token"])
    assert held[second]["token"] > held[first]["token"] and held[second]["holder"].endswith(second)
    # one release at a time: the second took the lease only after the first gave it back
    assert when(tis[second]["acquire_cluster_lease"], "end_date") >= when(tis[first]["release_cluster_lease"], "start_date")
    assert tis[first]["release_cluster_lease"]["state"] == "success"

    # Serve's own config, and the app itself, show the second run's version; the second replaced the first's
    want = f"dev-{'a' if second == 'dev_a' else 'b'}"
    assert deployed_version(clusters["dev"]) == want and serving_version(clusters["dev"]) == want


def test_dev_and_prod_keep_their_own_last_good_and_a_failed_prod_release_restores_prods(
    stack: CeleryStack, clusters: dict[str, RayHead]
) -> None:
    airflow = stack.airflow
    resp = airflow.trigger(DEPLOY, conf("prod", "prod-1"), run_id="prod_1")
    assert resp.status_code == 200, resp.text
    run_ok(stack, DEPLOY, "prod_1")
    assert serving_version(clusters["prod"]) == "prod-1"
    # dev releases after it: a store shared by target kind would now call dev's run the last good one
    resp = airflow.trigger(DEPLOY, conf("dev", "dev-c"), run_id="dev_c")
    assert resp.status_code == 200, resp.text
    run_ok(stack, DEPLOY, "dev_c")

    # prod-2 cannot start (its replicas ask for CUDA on a CPU cluster): the release fails and is rolled back
    bad = conf("prod", "prod-2", app_args={"version": "prod-2", "device": "cuda"})
    resp = airflow.trigger(DEPLOY, bad, run_id="prod_2")
    assert resp.status_code == 200, resp.text
    run = airflow.wait_run(DEPLOY, "prod_2", timeout_s=RUN_TIMEOUT_S)
    assert run["state"] == "failed", run
    log = airflow.task_log(DEPLOY, "prod_2", "rollback", try_number=airflow_tries(stack, "prod_2", "rollback"))
    # the rollback step's log keeps it as Airflow renders it (quotes escaped)
    assert re.search(r"restored app \\?'translator\\?' from the last good config \(run prod_1\)", log), log[-3000:]
    assert deployed_version(clusters["prod"]) == "prod-1" and serving_version(clusters["prod"]) == "prod-1"
    assert deployed_version(clusters["dev"]) == "dev-c"  # dev never touched by prod's release
    states = airflow.task_states(DEPLOY, "prod_2")
    assert states["release_cluster_lease"] == "success", states


def airflow_tries(stack: CeleryStack, run_id: str, task_id: str) -> int:
    (ti,) = [ti for ti in stack.task_instances(DEPLOY, run_id) if ti["task_id"] == task_id]
    return int(ti["try_number"])


def test_the_redeploy_schedule_runs_each_cluster_with_its_own_last_good_and_not_a_torn_down_one(
    stack: CeleryStack, clusters: dict[str, RayHead]
) -> None:
    airflow = stack.airflow
    resp = airflow.trigger("raylift_teardown", {"cluster_conn_id": "prod"}, run_id="teardown_prod")
    assert resp.status_code == 200, resp.text
    run_ok(stack, "raylift_teardown", "teardown_prod")
    dev_version = deployed_version(clusters["dev"])

    # a run as the schedule makes it: the clusters from the Param's default (the stack's AIRFLOW_VAR_...)
    resp = airflow.trigger("raylift_redeploy", {"app_name": "translator"}, run_id="nightly")
    assert resp.status_code == 200, resp.text
    run_ok(stack, "raylift_redeploy", "nightly")
    mapped = {ti["rendered_map_index"] or str(ti["map_index"]): ti["state"]
              for ti in stack.task_instances("raylift_redeploy", "nightly") if ti["task_id"] == "last_good_conf"}
    assert mapped == {"dev": "success", "prod": "skipped"}, mapped
    runs = airflow.ok("GET", f"/dags/{DEPLOY}/dagRuns", params={"limit": 100})["dag_runs"]
    redeploys = {r["dag_run_id"]: r for r in runs if r["dag_run_id"].startswith("redeploy__nightly")}
    assert list(redeploys) == ["redeploy__nightly__dev"], list(redeploys)
    run = redeploys["redeploy__nightly__dev"]
    assert run["conf"]["cluster_conn_id"] == "dev" and run["conf"]["app_args"] == {"version": dev_version}
    run_ok(stack, DEPLOY, "redeploy__nightly__dev")
    assert serving_version(clusters["dev"]) == dev_version


class Client:
    """A user of prod's endpoint for the whole test: one request every 0.3 s (bounded), every outcome kept."""

    def __init__(self, head: RayHead, max_s: float = 600) -> None:
        import threading

        self.head, self.max_s = head, max_s
        self.outcomes: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + self.max_s
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set() and time.monotonic() < deadline:
                try:
                    resp = client.post(f"{self.head.serve_url}/", json="Hello ECS!")
                    ok = resp.status_code == 200 and bool(resp.text.strip())
                    self.outcomes.append(resp.headers.get("x-raylift-app-version", "?") if ok else f"HTTP {resp.status_code}")
                except httpx.HTTPError as exc:
                    self.outcomes.append(f"error {type(exc).__name__}")
                self._stop.wait(0.3)

    def __enter__(self) -> Client:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def failures(self) -> list[str]:
        return [o for o in self.outcomes if o.startswith(("HTTP", "error"))]


def test_the_worker_holding_the_lease_dies_mid_deploy_and_the_retry_on_the_other_finishes(
    stack: CeleryStack, clusters: dict[str, RayHead]
) -> None:
    airflow, prod = stack.airflow, clusters["prod"]
    with Client(prod) as client:
        resp = airflow.trigger(DEPLOY, conf("prod", "prod-3"), run_id="prod_3")
        assert resp.status_code == 200, resp.text

        def deploying() -> str | None:  # the deploy task runs, and its config write has reached Serve
            (ti,) = [t for t in stack.task_instances(DEPLOY, "prod_3") if t["task_id"] == "deploy"]
            apps = prod.serve_apps().get("applications") or {}
            written = ((apps.get("translator") or {}).get("deployed_app_config") or {}).get("args", {})
            if ti["state"] == "running" and ti.get("hostname") and written.get("version") == "prod-3":
                return str(ti["hostname"])
            return None

        victim = airflow.wait_for("the deploy task mid-rollout", deploying, timeout_s=RUN_TIMEOUT_S, interval_s=0.5)
        assert stack.kill_worker(victim)
        try:
            run_ok(stack, DEPLOY, "prod_3")
        finally:
            stack.start_worker(victim)
        time.sleep(3)
    (deploy,) = [t for t in stack.task_instances(DEPLOY, "prod_3") if t["task_id"] == "deploy"]
    assert int(deploy["try_number"]) == 2 and deploy["hostname"] != victim, deploy
    assert deployed_version(prod) == "prod-3" and serving_version(prod) == "prod-3"
    assert client.outcomes and client.failures() == [], client.failures()[:10]
    assert "prod-3" in client.outcomes  # the client met the new version after the retry finished the rollout
    states = airflow.task_states(DEPLOY, "prod_3")
    assert states["release_cluster_lease"] == "success", states
