"""A light DAG for the multi-worker stack: two tasks that sleep a little and say where they ran."""

from __future__ import annotations

import os
import socket
import time

from airflow.sdk import DAG, Param, task

with DAG(
    dag_id="multiworker_probe",
    schedule=None,
    catchup=False,
    max_active_runs=8,
    params={"sleep_s": Param(4, type="number", minimum=0, description="How long each task sleeps (seconds).")},
    tags=["raylift-tests"],
):

    @task
    def where(params: dict | None = None) -> dict[str, object]:
        """Sleep, then report the host (the worker's Airflow host name), RAYLIFT_HOME and pid."""
        time.sleep(float((params or {}).get("sleep_s", 4)))
        return {
            "socket_hostname": socket.gethostname(),
            "airflow_hostname": os.environ.get("RAYLIFT_TEST_HOSTNAME"),
            "raylift_home": os.environ["RAYLIFT_HOME"],
            "pid": os.getpid(),
        }

    where.override(task_id="probe_a")()
    where.override(task_id="probe_b")()
