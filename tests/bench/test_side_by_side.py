"""The side-by-side benchmark (a canary beside the serving app) against two stub servers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from statistics import median
from typing import Any

import httpx
import pytest

from raylift.errors import EndpointNotAllowedError, RayliftValueError
from raylift.measure import runner
from raylift.measure.loadgen import LoadGenerator, RunOutcome
from raylift.measure.profiles import RequestSpec, generate_requests, get_profile
from raylift.measure.runner import Arm, run_benchmark, run_side_by_side


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every run_concurrency call: endpoint, concurrency, prompts, start and end (perf_counter)."""
    calls: list[dict[str, Any]] = []
    real = LoadGenerator.run_concurrency

    async def spied(self: LoadGenerator, specs: Sequence[RequestSpec], concurrency: int, **kw: Any) -> RunOutcome:
        t0 = time.perf_counter()
        outcome = await real(self, specs, concurrency, **kw)
        calls.append({"root": self.root, "concurrency": concurrency, "prompts": [s.prompt for s in specs],
                      "start": t0, "end": time.perf_counter()})
        return outcome

    monkeypatch.setattr(LoadGenerator, "run_concurrency", spied)
    return calls


def test_arms_run_the_same_rounds_at_once_each_measuring_its_own_server(
        stub: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = stub(ttft_ms=20, itl_ms=1), stub(ttft_ms=60, itl_ms=1)
    calls = _spy(monkeypatch)
    lines: list[str] = []
    results = run_side_by_side({"canary": Arm(fast), "baseline": Arm(slow, scale=2)}, "stub",
                               concurrency=[1, 2], requests_per_level=8, progress=lines.append)
    json.dumps(results)
    canary, baseline = results["canary"], results["baseline"]
    assert canary["arm"] == "canary" and canary["endpoint"] == fast and baseline["endpoint"] == slow
    # levels labelled with the canary's concurrency; the scaled arm sent twice the requests at each level
    assert [lv["concurrency"] for lv in canary["levels"]] == [lv["concurrency"] for lv in baseline["levels"]] == [1, 2]
    for mine, base in zip(canary["levels"], baseline["levels"]):
        assert (mine["scale"], base["scale"]) == (1, 2)
        assert (mine["requests"], base["requests"]) == (8, 16) and mine["errors"] == base["errors"] == 0
        assert mine["rounds"] == base["rounds"] == runner.rounds_for(8, mine["concurrency"])
        assert sum(base["samples"]["round_sizes"]["ttft_ms"]) == 16
        # each arm's samples are its own server's delays
        # (the median: one request of the fast stub may read slow on a busy machine; none reads fast)
        assert 20 <= min(mine["samples"]["ttft_ms"]) and median(mine["samples"]["ttft_ms"]) < 45, mine["samples"]
        assert min(base["samples"]["ttft_ms"]) >= 60
        # the stub has no /metrics: said per level, and the benchmark went on
        assert "unavailable" in mine["engine_metrics"] and "404" in base["engine_metrics"]["unavailable"]
    assert canary["overall"]["requests"] == 16 and baseline["overall"]["requests"] == 32
    assert canary["profile"] == baseline["profile"] and canary["requests_per_level"] == 8
    # what the servers saw, not what the client says
    assert httpx.get(f"{fast}/stats", timeout=10).json()["requests"] == 16
    assert httpx.get(f"{slow}/stats", timeout=10).json()["requests"] == 32
    # every round ran on both arms at once, the baseline at twice the concurrency, with the canary's prompts
    # (in order, each followed by one more from the same seeded stream)
    by_arm = {root: [c for c in calls if c["root"] == root] for root in (fast, slow)}
    assert len(by_arm[fast]) == len(by_arm[slow]) == sum(lv["rounds"] for lv in canary["levels"])
    expected = generate_requests(get_profile("smoke"), 8, seed_offset=2)  # run_benchmark's requests at level 2
    assert [p for c in by_arm[fast] if c["concurrency"] == 2 for p in c["prompts"]] == [s.prompt for s in expected]
    for mine, base in zip(by_arm[fast], by_arm[slow]):
        assert base["concurrency"] == 2 * mine["concurrency"]
        assert base["prompts"][0::2] == mine["prompts"] and len(base["prompts"]) == 2 * len(mine["prompts"])
        assert not set(base["prompts"][1::2]) & set(mine["prompts"])
        # simultaneous: each arm's round started before the other's ended
        assert mine["start"] < base["end"] and base["start"] < mine["end"], (mine, base)
    assert any(line.startswith("baseline: round 1/") for line in lines)


def test_a_scale_1_arm_sends_what_run_benchmark_sends(stub: Callable[..., str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    url = stub()
    calls = _spy(monkeypatch)
    run_benchmark(url, "stub", concurrency=[1, 4], requests_per_level=16)
    alone = [(c["concurrency"], c["prompts"]) for c in calls]
    calls.clear()
    results = run_side_by_side({"a": Arm(url), "b": Arm(url, model="other", scale=1)}, "stub",
                               concurrency=[1, 4], requests_per_level=16, engine_metrics=False)
    assert [(c["concurrency"], c["prompts"]) for c in calls[0::2]] == alone  # the same rounds, in the same order
    assert results["b"]["model"] == "other" and "engine_metrics" not in results["a"]["levels"][0]


def test_side_by_side_refuses_a_sweep_bad_arms_and_remote_endpoints() -> None:
    with pytest.raises(RayliftValueError, match="sweep"):
        run_side_by_side({"a": Arm("http://127.0.0.1:9")}, "m", sweep={"max_concurrency": 8})
    with pytest.raises(RayliftValueError, match="scale"):
        Arm("http://127.0.0.1:9", scale=0)
    with pytest.raises(RayliftValueError, match="arms"):
        run_side_by_side({}, "m")
    with pytest.raises(EndpointNotAllowedError):
        run_side_by_side({"a": Arm("http://127.0.0.1:9"), "b": Arm("http://192.0.2.1:8000")}, "m")


def test_goodput_and_engine_metrics_on_request(stub: Callable[..., str]) -> None:
    url = stub(ttft_ms=5, itl_ms=1)
    result = run_benchmark(url, "stub", concurrency=[2], requests_per_level=8, engine_metrics=True,
                           slos={"max_ttft_p99_ms": 1000.0, "max_error_rate": 0.0})
    level = result["levels"][0]
    assert level["engine_metrics"] == {"unavailable": "GET /metrics: HTTP 404"}
    good = level["goodput"]
    assert good["slos"] == {"ttft_ms": 1000.0} and good["good"] == 8 and good["share"] == 1.0
    assert good["goodput_rps"] == pytest.approx(level["requests_per_s"])
    assert result["overall"]["goodput"]["good"] == 8
    # a limit no request meets: goodput 0
    tight = run_benchmark(url, "stub", concurrency=[2], requests_per_level=4, slos={"ttft_ms": 1.0})
    assert tight["levels"][0]["goodput"]["good"] == 0 and "engine_metrics" not in tight["levels"][0]
    with pytest.raises(RayliftValueError, match="goodput SLO"):
        run_benchmark(url, "stub", slos={"p99": 3.0})


def _spans(url: str) -> list[tuple[float, float]]:
    """What a stub answered since the last call: each streamed request's (arrival, last write), CLOCK_MONOTONIC."""
    return [(float(a), float(b)) for a, b in httpx.get(f"{url}/stats", timeout=10).json()["spans"]]


def test_interleaved_arms_are_measured_alone_in_an_order_that_varies_by_round(stub: Callable[..., str]) -> None:
    """RMIT (runner.INTERLEAVED): the servers' own clocks show no two arms answering at the same moment, every
    round measures every arm, and the order of the arms changes from round to round."""
    urls = {"candidate": stub(ttft_ms=15, itl_ms=1), "baseline": stub(ttft_ms=15, itl_ms=1),
            "aa": stub(ttft_ms=15, itl_ms=1)}
    for url in urls.values():
        _spans(url)  # forget the readiness probes
    results = run_side_by_side({a: Arm(u) for a, u in urls.items()}, "stub", concurrency=[1, 2],
                               requests_per_level=16, design=runner.INTERLEAVED, seed=7)
    spans = {a: _spans(u) for a, u in urls.items()}
    assert {a: len(s) for a, s in spans.items()} == {a: 32 for a in urls}  # every request, on its own server
    # no request of one arm overlaps a request of another: each arm was measured alone
    for a in urls:
        for b in urls:
            if a < b:
                clash = [(x, y) for x in spans[a] for y in spans[b] if x[0] < y[1] and y[0] < x[1]]
                assert not clash, f"{a} and {b} were answering at once: {clash[:2]}"
    design = results["candidate"]["design"]
    assert design["name"] == runner.INTERLEAVED and design == results["baseline"]["design"]
    orders = design["orders"]
    assert len(orders) == sum(lv["rounds"] for lv in results["candidate"]["levels"]) == 8 + 4
    assert all(sorted(o["order"]) == sorted(urls) for o in orders)
    assert len({tuple(o["order"]) for o in orders}) >= 3, orders  # 12 rounds of 3 arms: not one fixed order
    # the record is what the servers saw: within each round, the arms' first arrivals come in the recorded order
    firsts = {a: sorted(s)[0][0] for a, s in spans.items()}
    assert sorted(urls, key=firsts.__getitem__) == orders[0]["order"]
    for a in urls:
        assert all(lv["requests"] == 16 and lv["errors"] == 0 for lv in results[a]["levels"])


def test_concurrent_arms_overlap_and_a_bad_design_is_refused(stub: Callable[..., str]) -> None:
    urls = {"candidate": stub(ttft_ms=30, itl_ms=2), "baseline": stub(ttft_ms=30, itl_ms=2)}
    for url in urls.values():
        _spans(url)
    results = run_side_by_side({a: Arm(u) for a, u in urls.items()}, "stub", concurrency=[1],
                               requests_per_level=8, design=runner.CONCURRENT)
    spans = {a: _spans(u) for a, u in urls.items()}
    assert results["candidate"]["design"]["name"] == runner.CONCURRENT
    assert any(x[0] < y[1] and y[0] < x[1] for x in spans["candidate"] for y in spans["baseline"])
    with pytest.raises(RayliftValueError, match="'interleaved'"):
        run_side_by_side({a: Arm(u) for a, u in urls.items()}, "stub", design="alternating")
