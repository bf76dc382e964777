"""The multi-worker stack is what it claims: CeleryExecutor on Postgres, tasks spread over two "hosts".

Airflow's own REST API is the judge (config, task instances' ``hostname``, XComs, import errors), and the
metadata DB itself (the runs are rows in the fixture's Postgres).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.celery_stack import WORKERS, CeleryStack
from tests.harness.local_stack import ROOT

pytestmark = pytest.mark.timeout(600)

PROBE = "multiworker_probe"
PROBE_TASKS = ("probe_a", "probe_b")
RAYLIFT_DAGS = sorted(p.stem for p in (ROOT / "dags").glob("*.py"))  # each file is named after its DAG
RUN_TIMEOUT_S = 300


def run_probes(stack: CeleryStack, prefix: str, runs: int, sleep_s: float = 4) -> dict[str, dict[str, Any]]:
    """Trigger ``runs`` probe runs at once, wait for them; ``{run_id/task_id: task instance + its XCom}``."""
    airflow = stack.airflow
    run_ids = [f"{prefix}_{i}" for i in range(runs)]
    for run_id in run_ids:
        resp = airflow.trigger(PROBE, {"sleep_s": sleep_s}, run_id=run_id)
        assert resp.status_code == 200, resp.text
    tis: dict[str, dict[str, Any]] = {}
    for run_id in run_ids:
        run = airflow.wait_run(PROBE, run_id, timeout_s=RUN_TIMEOUT_S)
        assert run["state"] == "success", airflow.failure_report(PROBE, run_id)
        for ti in stack.task_instances(PROBE, run_id):
            ti["xcom"] = airflow.xcom(PROBE, run_id, ti["task_id"])
            tis[f"{run_id}/{ti['task_id']}"] = ti
    assert len(tis) == runs * len(PROBE_TASKS)
    return tis


@pytest.fixture(scope="module")
def probe_ready(celery_stack: CeleryStack) -> CeleryStack:
    celery_stack.airflow.wait_dags([PROBE, *RAYLIFT_DAGS])
    celery_stack.airflow.unpause(PROBE)
    return celery_stack


def test_celery_on_postgres_runs_tasks_on_both_workers(probe_ready: CeleryStack) -> None:
    stack = probe_ready
    assert stack.config_option("core", "executor") == "CeleryExecutor"
    errors = stack.airflow.ok("GET", "/importErrors")
    assert errors["total_entries"] == 0, errors  # raylift's DAGs parse under this stack too

    tis = run_probes(stack, "spread", runs=3)

    hosts = {ti["hostname"] for ti in tis.values()}
    assert hosts == set(WORKERS), f"task instances ran on {hosts}: {tis}"
    for key, ti in tis.items():  # each task saw the RAYLIFT_HOME of the worker Airflow says ran it
        assert ti["xcom"]["raylift_home"] == str(stack.worker_homes[ti["hostname"]]), (key, ti)
        assert ti["xcom"]["airflow_hostname"] == ti["hostname"], (key, ti)
    assert len({ti["xcom"]["raylift_home"] for ti in tis.values()}) == 2

    # The metadata DB is the fixture's Postgres: the runs and where their tasks ran are rows there.
    rows = stack.sql("SELECT run_id, task_id, hostname FROM task_instance WHERE dag_id = %s AND run_id LIKE %s",
                     PROBE, "spread_%")
    assert {f"{run}/{task}": host for run, task, host in rows} == {k: ti["hostname"] for k, ti in tis.items()}
    assert stack.sql("SELECT version()")[0][0].startswith("PostgreSQL")


def test_a_killed_worker_is_gone_and_comes_back(probe_ready: CeleryStack) -> None:
    stack = probe_ready
    pids = stack.kill_worker("w1")
    assert pids and not stack.components["w1"].alive()
    assert stack.pids("w2"), "w2 went down with w1"

    alone = run_probes(stack, "alone", runs=1, sleep_s=1)
    assert {ti["hostname"] for ti in alone.values()} == {"w2"}

    stack.start_worker("w1")
    back = run_probes(stack, "back", runs=2)
    assert {ti["hostname"] for ti in back.values()} == set(WORKERS)
    assert not set(pids) & set(stack.pids("w1"))
    assert Path(stack.log_path("w1")).exists()
