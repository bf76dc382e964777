"""The llmperf-compatible summary: llmperf's field names, its definitions, and its file's flat layout.

The field list below is copied by hand from llmperf's ``token_benchmark_ray.py`` (``metrics_summary``)
and ``src/llmperf/common_metrics.py`` at ray-project/llmperf main; the statistics are checked against
numpy (percentiles, pandas' linear default; standard deviation with n - 1, pandas' ``std``).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from raylift.measure.llmperf_summary import format_llmperf, llmperf_file, metrics_summary, request_metrics
from raylift.measure.metrics import RequestRecord

# llmperf: for each of these, {"quantiles": {p25..p99}, "mean", "min", "max", "stddev"}
LLMPERF_METRICS = ["inter_token_latency_s", "ttft_s", "end_to_end_latency_s",
                   "request_output_throughput_token_per_s", "number_input_tokens", "number_output_tokens"]
LLMPERF_QUANTILES = ["p25", "p50", "p75", "p90", "p95", "p99"]
LLMPERF_RUN_FIELDS = ["num_requests_started", "error_rate", "number_errors", "error_code_frequency",
                      "mean_output_throughput_token_per_s", "num_completed_requests",
                      "num_completed_requests_per_min"]
LLMPERF_METADATA = ["version", "name", "model", "mean_input_tokens", "stddev_input_tokens", "mean_output_tokens",
                    "stddev_output_tokens", "num_concurrent_requests", "timestamp"]
MS = 1_000_000


def _record(rng: random.Random, *, error: str | None = None) -> RequestRecord:
    start = rng.randrange(10**9)
    ttft = rng.randrange(20, 80) * MS
    gaps = [rng.randrange(5, 15) * MS for _ in range(rng.randrange(4, 20))]
    content = [start + ttft]
    for g in gaps:
        content.append(content[-1] + g)
    end = content[-1] + 2 * MS
    return RequestRecord(start_ns=start, end_ns=end, first_content_ns=content[0], content_ns=content,
                         output_tokens=len(content), input_tokens=40, prompt_tokens=32, target_input_tokens=32,
                         error=error)


def test_the_summary_has_every_field_of_llmperfs_and_its_statistics() -> None:
    rng = random.Random(3)
    records = [_record(rng) for _ in range(40)] + [
        _record(rng, error="HTTP 400: too long"), _record(rng, error="HTTP 400: x"), _record(rng, error="timeout: 9s")]
    summary = metrics_summary(records, duration_s=2.5)
    assert set(summary) == set(LLMPERF_METRICS) | set(LLMPERF_RUN_FIELDS)
    for key in LLMPERF_METRICS:
        assert set(summary[key]) == {"quantiles", "mean", "min", "max", "stddev"}
        assert list(summary[key]["quantiles"]) == LLMPERF_QUANTILES
    ok = records[:40]
    # llmperf's definitions, computed here from the raw timestamps
    itl = [(r.content_ns[-1] - r.start_ns) / 1e9 / r.output_tokens for r in ok]
    e2e = [(r.end_ns - r.start_ns) / 1e9 for r in ok]
    for key, values in (("inter_token_latency_s", itl), ("end_to_end_latency_s", e2e),
                        ("ttft_s", [(r.first_content_ns - r.start_ns) / 1e9 for r in ok]),
                        ("request_output_throughput_token_per_s", [r.output_tokens / e for r, e in zip(ok, e2e)])):
        stats = summary[key]
        assert stats["mean"] == pytest.approx(np.mean(values))
        assert stats["stddev"] == pytest.approx(np.std(values, ddof=1))
        assert (stats["min"], stats["max"]) == (pytest.approx(min(values)), pytest.approx(max(values)))
        for q in LLMPERF_QUANTILES:
            assert stats["quantiles"][q] == pytest.approx(np.percentile(values, int(q[1:]))), (key, q)
    assert summary["number_input_tokens"]["mean"] == 32  # the sized prompt's count, as llmperf's prompt_len
    assert summary["num_requests_started"] == 43 and summary["number_errors"] == 3
    assert summary["error_rate"] == pytest.approx(3 / 43)
    assert summary["error_code_frequency"] == str({"400": 2, "timeout": 1})
    assert summary["mean_output_throughput_token_per_s"] == pytest.approx(sum(r.output_tokens for r in ok) / 2.5)
    assert summary["num_completed_requests"] == 40
    assert summary["num_completed_requests_per_min"] == pytest.approx(40 / 2.5 * 60)
    assert "inter_token_latency_s: mean" in format_llmperf(summary)


def test_the_file_is_flat_as_llmperf_writes_it_and_json_safe() -> None:
    rng = random.Random(4)
    profile = {"name": "llmperf-inf2", "mean_input_tokens": 3072, "stddev_input_tokens": 200,
               "mean_output_tokens": 512, "stddev_output_tokens": 20}
    flat = llmperf_file(metrics_summary([_record(rng) for _ in range(5)], 1.0), model="meta-llama/Llama-2-13b",
                        profile=profile, concurrency=22, timestamp=1700000000)
    expected = set(LLMPERF_METADATA) | {f"results_{f}" for f in LLMPERF_RUN_FIELDS}
    for key in LLMPERF_METRICS:
        expected |= {f"results_{key}_{s}" for s in ("mean", "min", "max", "stddev")}
        expected |= {f"results_{key}_quantiles_{q}" for q in LLMPERF_QUANTILES}
    assert expected <= set(flat), sorted(expected - set(flat))
    assert flat["num_concurrent_requests"] == 22 and flat["mean_input_tokens"] == 3072
    json.dumps(flat, allow_nan=False)  # strict JSON
    # nothing succeeded: no statistic, still valid JSON (pandas would write NaN)
    empty = metrics_summary([_record(rng, error="HTTP 500: boom")], 1.0)
    assert empty["ttft_s"]["mean"] is None and empty["num_completed_requests"] == 0
    json.dumps(empty, allow_nan=False)
    assert "ttft_s: mean -" in format_llmperf(empty)


def test_a_non_streamed_request_has_no_inter_token_latency() -> None:
    record = RequestRecord(start_ns=0, end_ns=100 * MS, output_tokens=10, streamed=False, target_input_tokens=7)
    metrics = request_metrics(record)
    assert metrics["inter_token_latency_s"] is None and metrics["ttft_s"] == pytest.approx(0.1)
    assert metrics["number_input_tokens"] == 7
