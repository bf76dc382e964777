"""raylift_redeploy's per-cluster part as Airflow itself runs it: ``dag.test()`` (the scheduler's loop, the Task SDK's
runner, a metadata DB of its own) on the DAG file's ``clusters`` → mapped ``last_good_conf`` tasks, with clusters as
Airflow connections and their stores as folders. The deploy trigger is left out: it waits for a raylift_deploy run,
which only a running scheduler would start (tests/entrypoints/test_schedule.py covers that part).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raylift.operators.cluster import TeardownOperator
from tests.operators.test_redeploy import GOOD_PARAMS, SCHEDULED, add_cluster, deploy

REPO = Path(__file__).resolve().parents[2]

RUN = """
import json, sys
from sqlalchemy import select
sys.path.insert(0, sys.argv[1])
import raylift_redeploy
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

dag = raylift_redeploy.dag.partial_subset(task_ids=["last_good_conf"], include_upstream=True, include_downstream=False)
run = dag.test(run_conf={"clusters": json.loads(sys.argv[2])})
with create_session() as session:
    rows = session.execute(select(XComModel.map_index, XComModel.value).where(
        XComModel.dag_id == dag.dag_id, XComModel.run_id == run.run_id, XComModel.task_id == "last_good_conf",
        XComModel.key == "return_value")).all()
    confs = {index: json.loads(value) if isinstance(value, str) else value for index, value in rows}
    tis = {ti.rendered_map_index: [ti.map_index, str(ti.state)] for ti in run.get_task_instances()
           if ti.task_id == "last_good_conf"}
print("RESULT " + json.dumps({"state": str(run.state), "tis": tis, "confs": confs}))
"""


@pytest.mark.timeout(300)
def test_a_scheduled_redeploy_maps_over_the_clusters_and_skips_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    home = tmp_path / "home"
    add_cluster(monkeypatch, home, "dev", 18265)
    add_cluster(monkeypatch, home, "prod", 28265)
    add_cluster(monkeypatch, home, "staging", 38265, redeploy=False)
    dev_params = {**GOOD_PARAMS, "served_name": "tiny-dev", "replicas": 1}
    deploy("dev", "manual__dev1", dev_params)
    deploy("prod", "manual__prod1", GOOD_PARAMS)
    deploy("staging", "manual__staging1", GOOD_PARAMS)
    TeardownOperator(task_id="teardown", target="local", cluster_conn_id="prod").execute({"run_id": "manual__td1"})

    airflow_home = tmp_path / "airflow"
    env = {**os.environ, "AIRFLOW_HOME": str(airflow_home), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
           "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)])}  # fmt: skip
    airflow = Path(sys.executable).with_name("airflow")
    migrate = subprocess.run([str(airflow), "db", "migrate"], env=env, capture_output=True, text=True, timeout=240,
                             check=False)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(REPO / "dags"), json.dumps(["dev", "prod", "staging", None])],
        env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    logs = out.stdout + out.stderr
    assert out.returncode == 0, logs[-4000:]
    result = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("RESULT "))[7:])

    assert result["state"] == "success"  # skipped clusters are no failure
    assert result["tis"] == {"dev": [0, "success"], "prod": [1, "skipped"], "staging": [2, "skipped"],
                             "local": [3, "skipped"]}
    assert result["confs"] == {"0": dev_params | {"cluster_conn_id": "dev"} | SCHEDULED}  # what run_raylift_deploy maps over
    assert "cluster 'prod': redeploys are paused since raylift_teardown run 'manual__td1'" in logs
    assert "cluster 'staging': its connection has redeploy false" in logs
    assert "target 'local': nothing to redeploy" in logs
