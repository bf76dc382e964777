"""Record the regression judgement's error-rate rounds against the stub server (``tests/harness/regression_rounds.py``)
into ``bench/results/regression_gate_rounds.json.gz``, which the unit test ``tests/bench/test_regression_gate.py``
judges at the default Params (false regressions at most 5 %, detection of a 30 % slowdown at least 90 %, exact
binomial tests). Re-record when the defaults, the stub or the client change (the test names the setup it expects).

The rounds are measured beside ``--busy`` processes that spin on the CPU (default 6): run live inside the suite, this
measurement shared the 2 cores with the other lanes (load average 5.7-17.6), which is where its false regressions came
from; an idle machine would record an easier sample than the one the gate meets.

    .cache/venvs/control/bin/python bench/regression_gate_rounds.py            # ~2 min, 192 benchmarks
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import multiprocessing
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "plugins"), str(ROOT)]

from tests.harness.regression_rounds import RECORDING, measure_rounds, setup  # noqa: E402


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy(n: int):  # type: ignore[no-untyped-def]
    """``n`` processes spinning on the CPU while the rounds are measured (stopped after, whatever happens)."""
    procs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(n)]
    for proc in procs:
        proc.start()
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.join(5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=RECORDING)
    ap.add_argument("--busy", type=int, default=6, help="processes spinning on the CPU beside the rounds")
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    t0, cpu0 = time.monotonic(), os.times()
    with busy(args.busy):
        rounds = measure_rounds()
        load = os.getloadavg()[0]
    cpu1 = os.times()
    record = {"what": "regression judgement error-rate rounds against the stub (tests/harness/regression_rounds.py)",
              "setup": setup(), "commit": commit.strip(), "at": datetime.now(UTC).isoformat(timespec="seconds"),
              "seconds": round(time.monotonic() - t0, 1),
              "client_cpu_s": round(cpu1.user + cpu1.system - cpu0.user - cpu0.system, 1),
              "busy_processes": args.busy, "load_average": load, "rounds": rounds}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(args.out, "wt") as f:
        json.dump(record, f, separators=(",", ":"))
    print(f"{len(rounds)} rounds in {record['seconds']} s -> {args.out} ({args.out.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
