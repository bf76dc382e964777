from __future__ import annotations

import numpy as np
import pytest

from raylift.bench.metrics import RequestRecord, distribution, percentile, summarize, wall_time_s

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
