"""The regression judgement's error rates, measured against the stub server with a known per-request
delay distribution, at the default Params (confidence, tolerance, requests per level).

Three stubs: two unchanged (TTFT 20 ms, ITL 3 ms, each request's TTFT and ITL times its own lognormal
factor, sigma 0.3) and a candidate 30 % slower (every delay x 1.3). Each round benchmarks the three at
once, like a canary analysis runs baseline and canary side by side, so a busy moment of this shared
machine falls on both samples of a comparison alike; 200 rounds give 200 comparisons of two unchanged
runs (false regressions) and 200 of an unchanged against the slow one (detections).
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from contextlib import ExitStack
from typing import Any

from raylift.bench.judgement import judge
from raylift.bench.runner import arun_benchmark
from raylift.config import (
    DEFAULT_MAX_REGRESSION,
    DEFAULT_REGRESSION_CONFIDENCE,
    DEFAULT_REQUESTS_PER_LEVEL,
    REGRESSION_MIN_REQUESTS,
)
from tests.bench.stub_server import running_stub

ROUNDS = 200
TTFT_MS, ITL_MS, JITTER, SLOWDOWN = 20.0, 3.0, 0.3, 1.3
CONCURRENCY = 32  # two waves of the default 64 requests: a round takes ~0.25 s
MAX_FALSE_REGRESSIONS, MIN_DETECTION = 0.05, 0.90


def _stub(stack: ExitStack, factor: float, seed: int) -> str:
    return stack.enter_context(running_stub(
        "--ttft-ms", str(TTFT_MS * factor), "--itl-ms", str(ITL_MS * factor), "--jitter", str(JITTER),
        "--seed", str(seed)))


async def _round(urls: list[str]) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(
        arun_benchmark(url, "stub", concurrency=[CONCURRENCY], requests_per_level=DEFAULT_REQUESTS_PER_LEVEL)
        for url in urls)))


def _judge(new: dict[str, Any], base: dict[str, Any]) -> Any:
    return judge(new, base, confidence=DEFAULT_REGRESSION_CONFIDENCE, tolerance=DEFAULT_MAX_REGRESSION,
                 min_requests=REGRESSION_MIN_REQUESTS)


def test_false_regression_rate_and_detection_power_at_the_defaults() -> None:
    t0 = time.monotonic()
    with ExitStack() as stack:
        urls = [_stub(stack, 1.0, 1), _stub(stack, 1.0, 2), _stub(stack, SLOWDOWN, 3)]
        rounds = [asyncio.run(_round(urls)) for _ in range(ROUNDS)]
    bench_s = time.monotonic() - t0
    unchanged = [_judge(b, a) for a, b, _ in rounds]
    slowed = [_judge(s, a) for a, _, s in rounds]
    false_rate = sum(j.verdict == "regressed" for j in unchanged) / ROUNDS
    caught = sum(j.verdict == "regressed" for j in slowed) / ROUNDS
    which = collections.Counter(m.metric for j in unchanged for m in j.metrics if m.verdict == "regressed")
    summary = (f"{ROUNDS} comparisons each at confidence {DEFAULT_REGRESSION_CONFIDENCE}, tolerance "
               f"{DEFAULT_MAX_REGRESSION}, {DEFAULT_REQUESTS_PER_LEVEL} requests per level: unchanged runs judged "
               f"regressed {false_rate:.1%} (metrics: {dict(which)}), inconclusive "
               f"{sum(j.verdict == 'inconclusive' for j in unchanged) / ROUNDS:.1%}; 30 % slowdown caught "
               f"{caught:.1%}, inconclusive {sum(j.verdict == 'inconclusive' for j in slowed) / ROUNDS:.1%} "
               f"(benchmarks {bench_s:.0f} s, all {time.monotonic() - t0:.0f} s, load {os.getloadavg()[0]:.1f})")
    print(summary)
    # no request failed: the rates are about timing, not errors
    assert all(lv["errors"] == 0 for r in rounds for run in r for lv in run["levels"]), summary
    assert false_rate <= MAX_FALSE_REGRESSIONS, summary
    assert caught >= MIN_DETECTION, summary
