from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import pytest

from raylift.errors import EndpointNotAllowedError
from raylift.measure.loadgen import LoadGenerator, RunOutcome, check_endpoint
from raylift.measure.metrics import distribution
from raylift.measure.profiles import RequestProfile, generate_requests
from tests.bench.priority import raised_priority

Stub = Callable[..., str]


def run(url: str, profile: RequestProfile, count: int, concurrency: int, *, max_seconds: float = 30,
        warmup: bool = False, **options: object) -> RunOutcome:
    async def go() -> RunOutcome:
        async with LoadGenerator(url, "stub", **options) as gen:  # type: ignore[arg-type]
            if warmup:  # open the connections first, as a long benchmark would have
                await gen.run_concurrency(generate_requests(profile, concurrency, seed_offset=1), concurrency,
                                          max_seconds=max_seconds)
            return await gen.run_concurrency(generate_requests(profile, count), concurrency,
                                             max_seconds=max_seconds)
    return asyncio.run(go())


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "https://api.example.com/v1", "http://0.0.0.0:8000"])
def test_refuses_non_loopback_unless_allowed(url: str) -> None:
    with pytest.raises(EndpointNotAllowedError, match="allow_remote=True"):
        check_endpoint(url)
    assert check_endpoint(url, allow_remote=True).startswith(url.split("/v1")[0])


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1/", "http://localhost:8000", "http://[::1]:8000"])
def test_accepts_loopback(url: str) -> None:
    assert not check_endpoint(url).endswith(("/", "/v1"))


TOLERANCE = {"ttft_ms": max(0.02 * 200.0, 1.0), "itl_ms": max(0.02 * 40.0, 1.0)}  # 2 % or 1 ms
INJECTED = {"ttft_ms": 200.0, "itl_ms": 40.0}


async def _accuracy_round(gen: LoadGenerator, url: str, concurrency: int) -> tuple[dict, dict]:
    """One untimed round (as a long benchmark would have had), then 2 × concurrency measured
    requests; returns the client's summary and the delays the stub reports it produced for them."""
    profile = RequestProfile("acc", 16, 0, 12, 0)
    await gen.run_concurrency(generate_requests(profile, concurrency, seed_offset=1), concurrency, max_seconds=30)
    httpx.get(f"{url}/stats", timeout=5)  # noqa: ASYNC210 - between rounds, nothing in flight; forget the untimed round
    outcome = await gen.run_concurrency(generate_requests(profile, 2 * concurrency), concurrency, max_seconds=30)
    done = httpx.get(f"{url}/stats", timeout=5).json()  # noqa: ASYNC210 - the round is over
    assert done["requests"] == 2 * concurrency
    return outcome.summary(), {m: distribution(done[m]) for m in INJECTED}


def _stub_on_time(achieved: dict) -> bool:
    """The stub produced the injected delays within half the tolerance (p50 and mean)."""
    return all(abs(achieved[m][s] - INJECTED[m]) <= TOLERANCE[m] / 2 for m in INJECTED for s in ("p50", "mean"))


@pytest.mark.parametrize("concurrency", [1, 64])
def test_measured_ttft_and_itl_match_injected_delays(stub: Stub, concurrency: int) -> None:
    """TTFT and ITL (p50 and mean) within 2 % or 1 ms of what the stub injects, at concurrency 1 and 64.

    The stub reports the delays it really produced (``GET /stats``: its write time minus the kernel's
    receive time of the request). On a busy shared machine the stub itself can be late; such a round
    says nothing about the client and is repeated (up to 3 rounds). In a round where the stub was on
    time (within half the tolerance), the client must match the injected values, and what the stub
    did, or the test fails. Only if the stub was never on time is the test skipped, saying so.
    """
    url = stub(ttft_ms=INJECTED["ttft_ms"], itl_ms=INJECTED["itl_ms"])
    late: list[str] = []

    async def go() -> None:
        async with LoadGenerator(url, "stub") as gen:
            for _ in range(3):
                summary, achieved = await _accuracy_round(gen, url, concurrency)
                assert summary["errors"] == 0 and summary["token_source"] == "usage"
                if _stub_on_time(achieved):
                    break
                late.append(", ".join(f"{m} p50 {achieved[m]['p50']:.2f} mean {achieved[m]['mean']:.2f}"
                                      for m in INJECTED))
            else:
                pytest.skip(f"machine too loaded: the stub itself missed the injected delays {INJECTED} in 3 "
                            f"rounds at concurrency {concurrency}: {'; '.join(late)}")
        for metric, expected in INJECTED.items():
            for stat in ("p50", "mean"):
                measured = summary[metric][stat]
                assert measured == pytest.approx(expected, abs=TOLERANCE[metric]), (metric, stat, summary[metric])
                assert measured == pytest.approx(achieved[metric][stat], abs=TOLERANCE[metric] / 2), (
                    metric, stat, summary[metric], achieved[metric])
        # TPOT = (e2e - TTFT) / (n - 1) with evenly spaced tokens
        assert summary["tpot_ms"]["p50"] == pytest.approx(INJECTED["itl_ms"], abs=TOLERANCE["itl_ms"])

    # the client ahead of ordinary processes while it measures, as the stub runs (a suite run at load ~10 once read
    # an ITL mean of 41.4 ms against 40 injected, with the stub on time)
    with raised_priority():
        asyncio.run(go())


def test_errors_are_counted_not_raised(stub: Stub) -> None:
    url = stub(fail_every=4)
    summary = run(url, RequestProfile("e", 8, 0, 4, 0), 20, 4).summary()
    assert summary["requests"] == 20 and summary["errors"] == 5
    assert summary["error_rate"] == 0.25 and summary["error_kinds"] == {"HTTP 500": 5}
    assert summary["output_tokens"] == 15 * 4


def test_max_requests_bound(stub: Stub) -> None:
    url = stub()
    outcome = run(url, RequestProfile("b", 8, 0, 4, 0), 7, 3)
    assert len(outcome.records) == 7 and outcome.cancelled == 0


def test_max_seconds_bound_cancels_in_flight(stub: Stub) -> None:
    url = stub(ttft_ms=100, itl_ms=100)  # each request takes ~1 s
    t0 = time.perf_counter()
    outcome = run(url, RequestProfile("b", 8, 0, 10, 0), 1000, 4, max_seconds=1.5)
    elapsed = time.perf_counter() - t0
    # the bound, not the 1000 requests (~250 s), ends the run; the upper limits leave a starved box (the suite's
    # three lanes on 2 cores) its slack: 1.87 s was measured there, and a second wave would end by ~2 s
    assert elapsed < 4.0
    assert len(outcome.records) == 4  # one wave finished, the second was cut off
    assert outcome.cancelled == 4 and 1.45 <= outcome.duration_s < 2.5, outcome.duration_s


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_apis_stream_and_non_stream(stub: Stub, api: str) -> None:
    url = stub(ttft_ms=5, itl_ms=2)
    profile = RequestProfile("s", 8, 0, 6, 0)
    streamed = run(url, profile, 4, 2, api=api).summary()
    assert streamed["errors"] == 0 and streamed["output_tokens"] == 24 and streamed["itl_ms"]["p50"] is not None
    whole = run(url, profile, 4, 2, api=api, stream=False).summary()
    assert whole["errors"] == 0 and whole["output_tokens"] == 24
    assert whole["itl_ms"]["p50"] is None and whole["ttft_ms"]["p50"] == whole["e2e_ms"]["p50"]


def test_token_count_falls_back_to_tokenizer_then_chunks(stub: Stub) -> None:
    url = stub(no_usage=True)
    profile = RequestProfile("t", 8, 0, 5, 0)
    by_chunks = run(url, profile, 2, 1).summary()
    assert by_chunks["token_source"] == "chunks" and by_chunks["output_tokens"] == 10
    by_words = run(url, profile, 2, 1, tokenizer=lambda text: 2 * len(text.split())).summary()
    assert by_words["token_source"] == "tokenizer" and by_words["output_tokens"] == 20


def test_request_body_pins_output_length() -> None:
    import json

    gen = LoadGenerator("http://127.0.0.1:1", "m", api="completions")
    spec = generate_requests(RequestProfile("p", 8, 0, 7, 0), 1)[0]
    body = json.loads(gen.body(spec))
    assert body["max_tokens"] == body["min_tokens"] == 7 and body["ignore_eos"] is True
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_fixed_rate_constant_arrivals(stub: Stub) -> None:
    url = stub()

    async def go() -> RunOutcome:
        async with LoadGenerator(url, "stub") as gen:
            return await gen.run_rate(generate_requests(RequestProfile("r", 8, 0, 2, 0), 10), 20.0,
                                      max_seconds=5, arrival="constant")
    outcome = asyncio.run(go())
    starts = sorted(r.start_ns for r in outcome.records)
    assert len(starts) == 10
    assert (starts[-1] - starts[0]) / 1e9 == pytest.approx(9 / 20.0, abs=0.1)


def test_sweep_stops_when_throughput_stops_growing(stub: Stub) -> None:
    url = stub(ttft_ms=10, itl_ms=10, max_active=2)  # a server that saturates at 2 streams

    async def go() -> dict:
        async with LoadGenerator(url, "stub") as gen:
            return await gen.sweep(RequestProfile("w", 8, 0, 5, 0), max_concurrency=32,
                                   requests_per_level=8, max_seconds_per_level=10)
    result = asyncio.run(go())
    concurrencies = [lv["concurrency"] for lv in result["levels"]]
    assert concurrencies in ([1, 2, 4], [1, 2, 4, 8])  # stops one or two doublings past saturation
    assert "throughput gain" in result["stop_reason"] and result["saturation_concurrency"] >= 2
    last, before = result["levels"][-1], result["levels"][-2]
    assert last["output_tokens_per_s"] < 1.05 * before["output_tokens_per_s"]


def test_sweep_stops_on_error_rate(stub: Stub) -> None:
    url = stub(fail_every=2)

    async def go() -> dict:
        async with LoadGenerator(url, "stub") as gen:
            return await gen.sweep(RequestProfile("w", 8, 0, 2, 0), requests_per_level=8,
                                   max_seconds_per_level=10, max_error_rate=0.1)
    result = asyncio.run(go())
    assert len(result["levels"]) == 1 and "error rate 50.0% > 10.0%" in result["stop_reason"]
