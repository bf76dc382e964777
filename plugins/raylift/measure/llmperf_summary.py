"""A benchmark level as llmperf's ``token_benchmark_ray.py`` summarises its run: the same field names and
the same definitions, so a seed's llmperf table (the Inferentia2 write-up's) can be set beside raylift's.

llmperf's per-request definitions (its OpenAI chat client and ``get_token_throughput_latencies``):

- ``ttft_s``: start → first chunk with content; ``end_to_end_latency_s``: start → end of the stream.
- ``inter_token_latency_s``: the sum of every content chunk's gap (the first one's being TTFT) over the
  output tokens, i.e. (last content chunk − start) / output tokens. This is not vLLM's ITL (the gaps
  after the first token) nor TPOT ((e2e − TTFT) / (tokens − 1)); see docs/benchmark-metrics.md.
- ``request_output_throughput_token_per_s``: output tokens / e2e.
- ``number_input_tokens``: the prompt's length as the client's tokenizer counts it (raylift: the served
  tokenizer's count of the prompt sent, else the server's usage, else the profile's target);
  ``number_output_tokens``: output tokens (raylift: the server's usage count).

The run summary: for each of those six, p25/p50/p75/p90/p95/p99 (linear interpolation, pandas'
default), mean, min, max and the sample standard deviation (pandas' ``std``, n − 1), over the requests
without an error; then ``num_requests_started``, ``error_rate``, ``number_errors``,
``error_code_frequency`` (as llmperf writes it, the ``str`` of a dict), ``mean_output_throughput_token_per_s``
(the successful requests' output tokens over the run's wall time), ``num_completed_requests`` and
``num_completed_requests_per_min``. The file llmperf writes flattens this under ``results_`` with the
run's metadata (``flatten_dict``, "_"); :func:`llmperf_file` does the same.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from raylift.measure.metrics import PERCENTILES, RequestRecord, percentile

INTER_TOKEN_LAT = "inter_token_latency_s"
TTFT = "ttft_s"
E2E_LAT = "end_to_end_latency_s"
REQ_OUTPUT_THROUGHPUT = "request_output_throughput_token_per_s"
NUM_INPUT_TOKENS = "number_input_tokens"
NUM_OUTPUT_TOKENS = "number_output_tokens"
SUMMARISED = (INTER_TOKEN_LAT, TTFT, E2E_LAT, REQ_OUTPUT_THROUGHPUT, NUM_INPUT_TOKENS, NUM_OUTPUT_TOKENS)
RESULTS_VERSION = "2023-08-31"  # llmperf's LLMPerfResults.version for this layout


def request_metrics(record: RequestRecord) -> dict[str, float | int | None]:
    """One request's llmperf metrics (seconds, tokens); None where a non-streamed request has no chunks."""
    e2e_s = (record.end_ns - record.start_ns) / 1e9
    ttft = record.ttft_ms
    last_content_ns = record.content_ns[-1] if record.content_ns else None
    itl = None
    if record.streamed and last_content_ns is not None and record.output_tokens:
        itl = (last_content_ns - record.start_ns) / 1e9 / record.output_tokens
    inputs = record.prompt_tokens if record.prompt_tokens is not None else (
        record.input_tokens if record.input_tokens is not None else record.target_input_tokens)
    return {
        INTER_TOKEN_LAT: itl,
        TTFT: None if ttft is None else ttft / 1e3,
        E2E_LAT: e2e_s,
        REQ_OUTPUT_THROUGHPUT: record.output_tokens / e2e_s if e2e_s > 0 else 0.0,
        NUM_INPUT_TOKENS: inputs,
        NUM_OUTPUT_TOKENS: record.output_tokens,
    }


def _stats(values: Sequence[float]) -> dict[str, Any]:
    data = sorted(values)
    if not data:  # pandas gives NaN; JSON has no NaN, so None
        return {"quantiles": dict.fromkeys(f"p{p}" for p in PERCENTILES), "mean": None, "min": None,
                "max": None, "stddev": None}
    return {
        "quantiles": {f"p{p}": percentile(data, p) for p in PERCENTILES},
        "mean": math.fsum(data) / len(data),
        "min": data[0],
        "max": data[-1],
        "stddev": statistics.stdev(data) if len(data) > 1 else None,
    }


def metrics_summary(records: Sequence[RequestRecord], duration_s: float) -> dict[str, Any]:
    """llmperf's ``results`` of one run (one concurrency level) from raylift's request records."""
    ok = [r for r in records if r.ok]
    per_request = [request_metrics(r) for r in ok]
    out: dict[str, Any] = {}
    for key in SUMMARISED:
        out[key] = _stats([float(v) for m in per_request if (v := m[key]) is not None])
    codes: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            code = r.error.split(":", 1)[0].removeprefix("HTTP ")
            codes[code] = codes.get(code, 0) + 1
    errors = len(records) - len(ok)
    output_tokens = sum(r.output_tokens for r in ok)
    out["num_requests_started"] = len(records)
    out["error_rate"] = errors / len(records) if records else 0
    out["number_errors"] = errors
    out["error_code_frequency"] = str(codes)
    out["mean_output_throughput_token_per_s"] = output_tokens / duration_s if duration_s > 0 else 0.0
    out["num_completed_requests"] = len(ok)
    out["num_completed_requests_per_min"] = len(ok) / duration_s * 60 if duration_s > 0 else 0.0
    return out


def flatten(data: Mapping[str, Any], parent: str = "") -> dict[str, Any]:
    """llmperf's ``flatten_dict``: nested keys joined with "_"."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{parent}_{key}" if parent else key
        if isinstance(value, Mapping):
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def llmperf_file(results: Mapping[str, Any], *, model: str, profile: Mapping[str, Any], concurrency: int,
                 timestamp: int, name: str = "") -> dict[str, Any]:
    """What llmperf writes as ``<model>_<in>_<out>_summary.json`` for one concurrency level."""
    metadata = {
        "version": RESULTS_VERSION,
        "name": name or f"{model}_{profile.get('mean_input_tokens')}_{profile.get('mean_output_tokens')}_summary",
        "model": model,
        "mean_input_tokens": profile.get("mean_input_tokens"),
        "stddev_input_tokens": profile.get("stddev_input_tokens"),
        "mean_output_tokens": profile.get("mean_output_tokens"),
        "stddev_output_tokens": profile.get("stddev_output_tokens"),
        "num_concurrent_requests": concurrency,
        "additional_sampling_params": {},
        "results": dict(results),
        "timestamp": timestamp,
    }
    return flatten(metadata)


def llmperf_files(result: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Each level of a raylift benchmark result (:func:`raylift.measure.runner.run_benchmark`) as the summary
    file llmperf writes for one concurrency, keyed by the concurrency."""
    started = result.get("started_at")
    timestamp = int(datetime.fromisoformat(started).timestamp()) if started else 0
    return {str(level["concurrency"]): llmperf_file(level["llmperf"], model=str(result["model"]),
                                                   profile=result.get("profile") or {},
                                                   concurrency=int(level["concurrency"]), timestamp=timestamp)
            for level in result["levels"] if "llmperf" in level}


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def format_llmperf(summary: Mapping[str, Any]) -> str:
    """The figures llmperf prints, one line each, for the task log."""
    lines = []
    for key in SUMMARISED:
        stats = summary[key]
        q = stats["quantiles"]
        lines.append(f"{key}: mean {_g(stats['mean'])} min {_g(stats['min'])} max {_g(stats['max'])} "
                     f"stddev {_g(stats['stddev'])} p50 {_g(q['p50'])} p90 {_g(q['p90'])} p99 {_g(q['p99'])}")
    lines.append(f"errors {summary['number_errors']} of {summary['num_requests_started']} "
                 f"(rate {summary['error_rate']:.3g}, {summary['error_code_frequency']}); "
                 f"output throughput {summary['mean_output_throughput_token_per_s']:.4g} tok/s; "
                 f"{summary['num_completed_requests']} completed, "
                 f"{summary['num_completed_requests_per_min']:.4g}/min")
    return "\n".join(lines)
