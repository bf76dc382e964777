"""Airflow's share of a warm raylift_deploy run: time between tasks / total run time.

Runs raylift_deploy twice with `airflow dags test` against an isolated stack (the first run warms it:
cluster up, artifact built, model staged, app deployed), then reads the second run's task start/end
times from Airflow's own database. Overhead = (run wall time - time covered by at least one
running task) / run wall time (goal < 10 %): the union of task intervals, so parallel tasks are not
counted twice. Writes bench/results/airflow_overhead.json.

    .cache/venvs/control/bin/python bench/airflow_overhead.py
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.local_stack import make_stack, stop_cluster, tiny_model_path  # noqa: E402

QUERY = """
import json
from airflow.models import DagRun, TaskInstance
from airflow.utils.session import create_session
with create_session() as s:
    run = s.query(DagRun).filter(DagRun.dag_id == "raylift_deploy").order_by(DagRun.start_date.desc()).first()
    tis = s.query(TaskInstance).filter(TaskInstance.run_id == run.run_id, TaskInstance.dag_id == run.dag_id).all()
    print(json.dumps({"run_id": run.run_id, "start": run.start_date.timestamp(), "end": run.end_date.timestamp(),
        "tasks": {t.task_id: [t.start_date.timestamp(), t.end_date.timestamp()] for t in tis if t.start_date}}))
"""


def covered_seconds(intervals: list[list[float]]) -> float:
    """Length of the union of [start, end] intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def gaps(data: dict) -> dict[str, float]:
    """Idle time before each task (since the previous task ended, or the run started) and after the last."""
    out, reach = {}, data["start"]
    for task, (start, end) in sorted(data["tasks"].items(), key=lambda kv: kv[1][0]):
        out[f"before {task}"] = round(max(0.0, start - reach), 2)
        reach = max(reach, end)
    out["after the last task"] = round(max(0.0, data["end"] - reach), 2)
    return out


def main() -> int:
    stack = make_stack(Path(tempfile.mkdtemp(prefix="rl-ovh-")), port_base=23000)
    conf = {"model_source": str(tiny_model_path()), "model_id": "bench/tiny", "served_name": "tiny-ovh",
            "concurrency": [1], "requests_per_level": 8}
    try:
        for label in ("warm-up", "measured"):
            t0 = time.monotonic()
            res = stack.dags_test("raylift_deploy", conf)
            print(f"{label} run: rc={res.returncode} in {time.monotonic() - t0:.1f}s", flush=True)
            if res.returncode != 0:
                print(res.stdout[-3000:], res.stderr[-3000:])
                return 1
        import subprocess

        out = subprocess.run([sys.executable, "-c", QUERY], env=stack.env, capture_output=True, text=True, check=True)
        data = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        stop_cluster(stack)
    total = data["end"] - data["start"]
    busy = covered_seconds(list(data["tasks"].values()))
    result = {
        "what": "Airflow overhead of a warm raylift_deploy run (airflow dags test)",
        "run_wall_s": round(total, 2),
        "task_time_s": round(busy, 2),
        "overhead_s": round(total - busy, 2),
        "overhead_ratio": round((total - busy) / total, 4),
        "tasks_s": {k: round(v[1] - v[0], 2) for k, v in sorted(data["tasks"].items(), key=lambda kv: kv[1][0])},
        "gaps_s": gaps(data),
        "machine": f"{os.cpu_count()} CPUs",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = ROOT / "bench/results/airflow_overhead.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
