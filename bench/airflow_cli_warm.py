"""What the suite's warm Airflow CLI saves per ``airflow dags test``: CPU of the plain command against the same
command forked from a warm Airflow (tests/harness/airflow_forkserver.py), alternating, on one stack.

The command is ``airflow dags test raylift_teardown`` on a fresh home (its one task finds no cluster to stop): what
every ``dags test`` pays before and around raylift's own tasks (Airflow's imports, the in-process Execution API and
its first request, the DAG folder parsed and serialized). Plain: CPU of the subprocess and its children
(``RUSAGE_CHILDREN``). Warm: the forked child's own rusage (``wait4`` in the server). The server's one-off warm-up is
reported beside them: it is paid once per stack.

Writes bench/results/airflow_cli_warm.json.

    .cache/venvs/control/bin/python bench/airflow_cli_warm.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.local_stack import make_stack  # noqa: E402

COMMAND = ("dags", "test", "raylift_teardown", "--conf", "{}")


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench/results/airflow_cli_warm.json"))
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="rl-cli-warm-"))
    plain = make_stack(home, port_base=23000)  # 23xxx: airflow_overhead's too; benchmarks do not run at once
    warm = make_stack(home, port_base=23000, warm_cli=True)
    assert warm.warm_cli is not None
    samples: dict[str, list[float]] = {"plain_cpu_s": [], "warm_cpu_s": [], "plain_wall_s": [], "warm_wall_s": []}
    warm_up_cpu_s = None
    try:
        for _ in range(args.rounds):
            before, started = children_cpu(), time.monotonic()
            done = plain.airflow(*COMMAND)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            samples["plain_wall_s"].append(time.monotonic() - started)
            samples["plain_cpu_s"].append(children_cpu() - before)
            started = time.monotonic()
            done = warm.airflow(*COMMAND)
            assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
            samples["warm_wall_s"].append(time.monotonic() - started)
            samples["warm_cpu_s"].append(warm.warm_cli.last_cpu_s)
            if warm_up_cpu_s is None:  # the server's own CPU: its warm-up (it forks, it does not run commands)
                assert warm.warm_cli.proc is not None
                times = psutil.Process(warm.warm_cli.proc.pid).cpu_times()
                warm_up_cpu_s = times.user + times.system
    finally:
        warm.warm_cli.close()
    median = {k: round(statistics.median(v), 2) for k, v in samples.items()}
    result = {
        "command": "airflow " + " ".join(COMMAND), "rounds": args.rounds,
        "median": median, "samples": {k: [round(x, 2) for x in v] for k, v in samples.items()},
        "warm_cpu_ratio": round(median["warm_cpu_s"] / median["plain_cpu_s"], 3),
        "saved_cpu_s_per_command": round(median["plain_cpu_s"] - median["warm_cpu_s"], 2),
        "server_warm_up_cpu_s": round(warm_up_cpu_s or 0.0, 2),
    }
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
