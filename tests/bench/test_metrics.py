from __future__ import annotations

import numpy as np
import pytest

from raylift.measure.metrics import RequestRecord, distribution, percentile, summarize, wall_time_s

MS = 1_000_000  # ns per ms


def test_percentile_matches_numpy_linear() -> None:
    values = sorted([3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.3, 5.8, 9.7])
    for q in (0, 25, 50, 75, 90, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    with pytest.raises(ValueError):
        percentile([], 50)


def test_distribution_keys_and_empty() -> None:
    stats = distribution([10.0, 20.0, 30.0, 40.0])
    assert list(stats) == ["mean", "p25", "p50", "p75", "p90", "p95", "p99"]
    assert stats["mean"] == 25.0 and stats["p50"] == 25.0 and stats["p25"] == 17.5
    assert all(v is None for v in distribution([]).values())


def _record(ttft_ms: float, gaps_ms: list[float], tokens: int, *, error: str | None = None) -> RequestRecord:
    start = 1_000 * MS
    times = [start + int(ttft_ms * MS)]
    for gap in gaps_ms:
        times.append(times[-1] + int(gap * MS))
    return RequestRecord(start_ns=start, end_ns=times[-1] + 5 * MS, first_content_ns=times[0],
                         content_ns=times, output_tokens=tokens, error=error)


def test_tpot_itl_ttft_of_one_request() -> None:
    record = _record(100, [10, 20, 30], tokens=4)
    assert record.ttft_ms == 100
    assert record.itl_ms() == [10, 20, 30]  # TTFT is not an inter-token gap
    assert record.e2e_ms == 165
    assert record.tpot_ms == pytest.approx((165 - 100) / 3)
    assert record.output_tokens_per_s == pytest.approx(4 / 0.165)
    assert _record(50, [], tokens=1).tpot_ms is None


def test_non_streamed_ttft_is_e2e_and_no_tpot() -> None:
    record = RequestRecord(start_ns=0, end_ns=80 * MS, output_tokens=10, streamed=False)
    assert record.ttft_ms == 80 and record.tpot_ms is None


def test_summarize_counts_errors_and_excludes_them_from_latency() -> None:
    records = [_record(100, [10], 2), _record(300, [10], 2),
               _record(1, [], 0, error="HTTP 500: boom"), _record(1, [], 0, error="timeout: ReadTimeout")]
    summary = summarize(records, duration_s=2.0, cancelled=3)
    assert summary["requests"] == 4 and summary["errors"] == 2 and summary["error_rate"] == 0.5
    assert summary["cancelled"] == 3
    assert summary["error_kinds"] == {"HTTP 500": 1, "timeout": 1}
    assert summary["output_tokens"] == 4 and summary["output_tokens_per_s"] == 2.0
    assert summary["requests_per_s"] == 1.0
    assert summary["ttft_ms"]["mean"] == 200 and summary["ttft_ms"]["p50"] == 200
    assert wall_time_s(records) == pytest.approx((records[1].end_ns - records[0].start_ns) / 1e9)


def test_goodput_counts_the_requests_within_every_limit() -> None:
    from raylift.errors import RayliftValueError
    from raylift.measure.metrics import goodput, goodput_slos, samples

    # TTFT 100/200/300 ms; TPOT (e2e - TTFT)/(tokens - 1): 15, 15, 65; one error
    records = [_record(100, [10], 2), _record(200, [10], 2), _record(300, [60], 2),
               _record(1, [], 0, error="HTTP 500: boom")]
    out = goodput(records, 2.0, {"ttft_ms": 250, "tpot_ms": 20}, cancelled=1)
    assert out["slos"] == {"ttft_ms": 250.0, "tpot_ms": 20.0} and out["met"] == {"ttft_ms": 2, "tpot_ms": 2}
    assert (out["good"], out["requests"]) == (2, 5)  # the error and the cancelled request count as missed
    assert out["share"] == pytest.approx(2 / 5) and out["goodput_rps"] == pytest.approx(1.0)
    # every limit must hold: TTFT <= 150 lets 1 (100 ms) through, e2e (115/215/365 ms) <= 230 lets 2
    assert goodput(records, 1.0, {"ttft_ms": 150, "e2e_ms": 230})["good"] == 1
    # a level's samples give the same answer as its records
    assert goodput(samples(records), 2.0, {"ttft_ms": 250, "tpot_ms": 20}, cancelled=1) == out
    # the benchmark's SLO keys: the TTFT p99 limit is each request's TTFT limit, the others limit no request
    assert goodput_slos({"max_ttft_p99_ms": 250, "max_error_rate": 0.0, "min_output_tokens_per_s": None,
                         "e2e_ms": None}) == {"ttft_ms": 250.0}
    assert goodput(records, 2.0, {"max_error_rate": 0.0})["good"] == 3  # no latency limit: every success
    # one output token: no TPOT, no decode phase to hold to a TPOT limit
    one = [_record(100, [], 1)]
    assert goodput(one, 1.0, {"tpot_ms": 1})["good"] == 1
    assert "unavailable" in goodput(samples(one), 1.0, {"tpot_ms": 1})  # its samples have no TPOT to line up
    for bad in ({"p99_ms": 1}, {"ttft_ms": 0}, {"ttft_ms": "fast"}):
        with pytest.raises(RayliftValueError, match="goodput SLO"):
            goodput_slos(bad)
    assert "goodput" not in summarize(records, 2.0)
    assert summarize(records, 2.0, cancelled=1, slos={"ttft_ms": 250, "tpot_ms": 20})["goodput"] == out
