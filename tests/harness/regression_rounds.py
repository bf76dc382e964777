"""Rounds of the regression judgement's error-rate measurement against the stub server (a known per-request delay
distribution), shared by ``bench/regression_gate_rounds.py`` (which records them) and the unit test that judges the
recording (``tests/bench/test_regression_gate.py``).

Four stubs: three unchanged (TTFT 80 ms, ITL 12 ms, each request's TTFT and ITL times its own lognormal factor, sigma
0.3) and a candidate 30 % slower (every delay x 1.3). Each round benchmarks the four at once, like a canary analysis runs
baseline and canary side by side, so a busy moment of this shared machine falls on both samples of a comparison alike.
A round gives three comparisons of two unchanged runs (false regressions: each pair of the three) and three of an
unchanged against the slow one (detections).
"""

from __future__ import annotations

import asyncio
import gzip
import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from raylift.config import DEFAULT_REQUESTS_PER_LEVEL
from raylift.measure.runner import arun_benchmark
from tests.bench.priority import raised_priority
from tests.harness.stub_server import running_stub

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "bench/results/regression_gate_rounds.json.gz"
ROUNDS = 48
# delays long against a busy machine's stalls: "regressed" needs the whole interval beyond +10 %, which two
# unchanged stubs reach only when the machine makes one of them late; at 20 ms / 3 ms a CI run beside the
# heavy lane (load 9.8) saw 5.5 % of unchanged pairs judged regressed, every one on TTFT or TPOT, and at 40 ms /
# 6 ms a suite run on a slower CPU (AMD EPYC, AVX2 only; load 5.7) saw 6.7 %
TTFT_MS, ITL_MS, JITTER, SLOWDOWN = 80.0, 12.0, 0.3, 1.3
CONCURRENCY = 32  # two waves of the default 64 requests: a round takes ~1 s


def stub(stack: ExitStack, factor: float, seed: int) -> str:
    return stack.enter_context(running_stub(
        "--ttft-ms", str(TTFT_MS * factor), "--itl-ms", str(ITL_MS * factor), "--jitter", str(JITTER),
        "--seed", str(seed)))


async def _round(urls: list[str]) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(
        arun_benchmark(url, "stub", concurrency=[CONCURRENCY], requests_per_level=DEFAULT_REQUESTS_PER_LEVEL)
        for url in urls)))


def measure_rounds(rounds: int = ROUNDS) -> list[list[dict[str, Any]]]:
    """``rounds`` rounds of the four stubs' benchmarks (three unchanged, then the slow one), the client ahead of
    ordinary processes while it measures, as the stubs run."""
    with ExitStack() as stack, raised_priority():
        urls = [stub(stack, 1.0, 1), stub(stack, 1.0, 2), stub(stack, 1.0, 3), stub(stack, SLOWDOWN, 4)]
        return [asyncio.run(_round(urls)) for _ in range(rounds)]


def setup() -> dict[str, Any]:
    """What a recording was measured with: a judge of it checks these against the current defaults."""
    return {"rounds": ROUNDS, "ttft_ms": TTFT_MS, "itl_ms": ITL_MS, "jitter": JITTER, "slowdown": SLOWDOWN,
            "concurrency": CONCURRENCY, "requests_per_level": DEFAULT_REQUESTS_PER_LEVEL}


def read_recording(path: Path = RECORDING) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        data: dict[str, Any] = json.load(f)
    return data
