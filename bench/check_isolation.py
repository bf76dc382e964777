"""What isolating the engine-args check costs: the old path (``subprocess.run`` of the runtime Python with the scrubbed
environment, as raylift ran it before issue 57) against the new one (``raylift.local.isolated.run_isolated``: clean
re-exec, double fork out of the worker's tree, Landlock), on the same check, paired and interleaved.

Why paired and interleaved: the check is ~20 s of a vLLM import on a shared 2-core machine whose load drifts over
minutes, so each round runs both paths back to back (their order alternating round to round) and the result is the
per-round ratio new/old, summarised by its median and range, with the median wall and CPU of each path beside it.
A second, trivial target (``python -m noop``, an empty module) gives the launcher's own cost in milliseconds, many rounds.

Only the check: no Ray cluster, no vLLM engine (``llm.check_args`` builds the engine config, no weights loaded).
Verdict caching (``validate_engine_args``' own) is bypassed: each round runs the check.

    python bench/check_isolation.py [--rounds 5] [--launcher-rounds 40] [--model PATH]
writes ``bench/results/check_isolation.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from raylift.config import SERVE_APPS_DIR_NAME, LocalSettings  # noqa: E402
from raylift.local.isolated import run_isolated  # noqa: E402
from raylift.secrets import child_env  # noqa: E402

Run = Callable[[list[str], Path], tuple[float, float, str]]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def old_path(python: Path) -> Run:
    """As raylift ran the check before issue 57: a direct child, capture_output, the scrubbed environment."""
    def run(argv: list[str], cwd: Path) -> tuple[float, float, str]:
        cpu0, t0 = children_cpu(), time.perf_counter()
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, env=child_env())
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-800:])
        return wall, children_cpu() - cpu0, proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return run


def new_path(python: Path) -> Run:
    """Through raylift's launcher: its own CPU (a reaped child) plus the check's, which the keeper reports."""
    def run(argv: list[str], cwd: Path) -> tuple[float, float, str]:
        cpu0, t0 = children_cpu(), time.perf_counter()
        proc, isolation = run_isolated(argv, python=python, env=child_env(), cwd=cwd, timeout=600)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-800:])
        cpu = children_cpu() - cpu0 + (isolation.cpu_s or 0.0)
        return wall, cpu, proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    return run


def paired(rounds: int, argv: list[str], cwd: Path, python: Path) -> dict[str, Any]:
    paths = {"old": old_path(python), "new": new_path(python)}
    rows: list[dict[str, Any]] = []
    for i in range(rounds):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        row: dict[str, Any] = {"round": i, "order": list(order)}
        for name in order:
            wall, cpu, verdict = paths[name](argv, cwd)
            row[name] = {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "verdict": verdict[:200]}
        row["wall_ratio"] = round(row["new"]["wall_s"] / row["old"]["wall_s"], 4)
        row["cpu_ratio"] = round(row["new"]["cpu_s"] / row["old"]["cpu_s"], 4) if row["old"]["cpu_s"] else None
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)

    def summary(key: str) -> dict[str, float]:
        values = [r[key] for r in rows if r[key] is not None]
        return {"median": round(statistics.median(values), 4), "min": min(values), "max": max(values)}

    return {
        "rounds": rows,
        "wall_ratio_new_over_old": summary("wall_ratio"),
        "cpu_ratio_new_over_old": summary("cpu_ratio"),
        "median_wall_s": {n: round(statistics.median(r[n]["wall_s"] for r in rows), 4) for n in paths},
        "median_cpu_s": {n: round(statistics.median(r[n]["cpu_s"] for r in rows), 4) for n in paths},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds of the real check")
    parser.add_argument("--launcher-rounds", type=int, default=40, help="paired rounds of a trivial target")
    parser.add_argument("--model", default=os.environ.get("RAYLIFT_TINY_MODEL", str(ROOT / ".cache" / "tiny-llama")))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "check_isolation.json"))
    args = parser.parse_args()
    python = LocalSettings().runtime_python
    apps = ROOT / SERVE_APPS_DIR_NAME
    with tempfile.TemporaryDirectory() as empty:  # a module that does nothing: what the launcher adds, alone
        (Path(empty) / "noop.py").write_text("")
        launcher = paired(args.launcher_rounds, [str(python), "-m", "noop"], Path(empty), python)
    check = paired(args.rounds, [str(python), "-m", "llm.check_args", args.model,
                                 json.dumps({"max_model_len": 64})], apps, python) if args.rounds else None
    result = {
        "what": "engine-args check, old path (direct child, scrubbed env) vs raylift.local.isolated (issue 57)",
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "load_at_start": os.getloadavg()},
        "runtime_python": str(python), "model": args.model,
        "launcher_only": {k: v for k, v in launcher.items() if k != "rounds"},
        "launcher_overhead_ms_median": round(
            (launcher["median_wall_s"]["new"] - launcher["median_wall_s"]["old"]) * 1000, 2),
        "check": check,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("launcher_overhead_ms_median",)} | (
        {"check_wall_ratio": check["wall_ratio_new_over_old"], "check_cpu_ratio": check["cpu_ratio_new_over_old"],
         "check_median_wall_s": check["median_wall_s"]} if check else {})))


if __name__ == "__main__":
    main()
