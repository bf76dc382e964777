"""Airflow's share of a warm raylift_deploy run: time between tasks / total run time, and more.

Runs raylift_deploy twice with `airflow dags test` against an isolated stack (the first run warms it:
cluster up, artifact built, model staged, app deployed), then reads the second run's task start/end
times from Airflow's own database and its log. Two numbers:

* ``between_tasks_ratio`` (the aim, < 10 %): idle time between one task's end and the next task's
  start (the union of task intervals, so parallel tasks are not counted twice) / run wall time;
* ``airflow_ratio``: everything that is not raylift's code: the gaps above, plus the time from the
  run's start to its first task (dags test parses the DAG folder and creates the run), plus each
  task's runner start-up inside its interval (from "[DAG TEST] running task" to the execution API's
  "Task started"; the first one builds the in-process execution API). This part is fixed per run,
  so its share shrinks as the benchmark grows.

Writes bench/results/airflow_overhead.json.

    .cache/venvs/control/bin/python bench/airflow_overhead.py
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.local_stack import make_stack, stop_cluster, tiny_model_path  # noqa: E402

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


LOG_TS = r"^(\d{4}-\d\d-\d\dT[\d:.]+)Z"


def runner_startups(log: str) -> dict[str, list[tuple[float, float]]]:
    """Per task: (handed to a task runner, runner reported "Task started") timestamps, from the log."""
    out: dict[str, list[tuple[float, float]]] = {}
    pending: tuple[str, float] | None = None
    for line in log.splitlines():
        ts = re.match(LOG_TS, line)
        if not ts:
            continue
        t = datetime.fromisoformat(ts.group(1) + "+00:00").timestamp()
        if m := re.search(r"\[DAG TEST\] running task <TaskInstance: \w+\.(\w+) ", line):
            pending = (m.group(1), t)
        elif "Task started" in line and pending is not None:
            out.setdefault(pending[0], []).append((pending[1], t))
            pending = None
    return out


def startup_inside_tasks(startups: dict[str, list[tuple[float, float]]], tasks: dict[str, list[float]]) -> dict[str, float]:
    """The part of each task's interval spent starting its runner (the rest of the start-up lies
    before the task's start time, where it already counts as a gap)."""
    out = {}
    for task, spans in startups.items():
        start, end = tasks.get(task, (0.0, 0.0))
        out[task] = round(sum(max(0.0, min(b, end) - max(a, start)) for a, b in spans), 2)
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
    gap = gaps(data)
    first = next(iter(gap))
    between = sum(v for k, v in gap.items() if k != first)
    log = sorted(stack.home.glob("dags-test-*-raylift_deploy.log"))[-1].read_text()
    startup = startup_inside_tasks(runner_startups(log), data["tasks"])
    airflow_s = (total - busy) + sum(startup.values())
    result = {
        "what": "Airflow overhead of a warm raylift_deploy run (airflow dags test)",
        "run_wall_s": round(total, 2),
        "task_time_s": round(busy, 2),
        "between_tasks_s": round(between, 2),
        "between_tasks_ratio": round(between / total, 4),
        "run_start_to_first_task_s": gap[first],
        "task_runner_startup_s": startup,
        "airflow_s": round(airflow_s, 2),
        "airflow_ratio": round(airflow_s / total, 4),
        "raylift_code_s": round(total - airflow_s, 2),
        "tasks_s": {k: round(v[1] - v[0], 2) for k, v in sorted(data["tasks"].items(), key=lambda kv: kv[1][0])},
        "gaps_s": gap,
        "machine": f"{os.cpu_count()} CPUs",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = ROOT / "bench/results/airflow_overhead.json"
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
