"""The local stack's Airflow survives its own load (issue 56, item 5): what tools/airflow_env.sh sets is what
Airflow's task SDK and DAG processor read."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.component  # a bash and a Python child
def test_airflow_reads_the_local_stacks_execution_api_and_parsing_settings(tmp_path: Path) -> None:
    probe = ("from airflow.configuration import conf; print(conf.getfloat('workers', 'execution_api_timeout'), "
             "conf.getint('workers', 'execution_api_retries'), "
             "conf.getint('dag_processor', 'min_file_process_interval'))")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RAYLIFT_HOME": str(tmp_path)}
    out = subprocess.run(["bash", "-c", f'source tools/airflow_env.sh && python -c "{probe}"'], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    # Airflow's defaults are 5.0, 5 and 30: a start call timed out at 5 s on 2 busy cores
    assert out == ["30.0", "8", "120"], out
    # a value the user set wins
    env["AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT"] = "45"
    out = subprocess.run(["bash", "-c", f'source tools/airflow_env.sh && python -c "{probe}"'], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout.split()
    assert out[0] == "45.0", out
