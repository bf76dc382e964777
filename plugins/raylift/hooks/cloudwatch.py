"""Benchmark results as CloudWatch custom metrics (namespace ``raylift``; dimensions Model, Target, RunId),
so a dashboard and alarms can follow TTFT, ITL, throughput and errors run after run."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

NAMESPACE = "raylift"

# metric name -> (path into result["overall"], unit)
BENCHMARK_METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    "TimeToFirstTokenP50": (("ttft_ms", "p50"), "Milliseconds"),
    "TimeToFirstTokenP99": (("ttft_ms", "p99"), "Milliseconds"),
    "InterTokenLatencyP50": (("itl_ms", "p50"), "Milliseconds"),
    "OutputTokensPerSecond": (("output_tokens_per_s",), "Count/Second"),
    "ErrorRate": (("error_rate",), "None"),
}


def _dig(data: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def benchmark_metric_data(
    result: dict[str, Any], *, model: str, target: str, run_id: str, timestamp: datetime | None = None
) -> list[dict[str, Any]]:
    """``MetricData`` entries for the values ``result["overall"]`` has (missing or non-finite ones are left out)."""
    overall = result.get("overall") or {}
    when = timestamp or datetime.now(UTC)
    dims = [{"Name": "Model", "Value": model}, {"Name": "Target", "Value": target}, {"Name": "RunId", "Value": run_id}]
    data = []
    for name, (path, unit) in BENCHMARK_METRICS.items():
        value = _dig(overall, path)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            data.append({"MetricName": name, "Dimensions": dims, "Value": float(value), "Unit": unit, "Timestamp": when})
    return data


class BenchmarkMetricsHook(AwsBaseHook):
    """CloudWatch client for benchmark metrics (``AwsBaseHook(client_type="cloudwatch")``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "cloudwatch"
        super().__init__(*args, **kwargs)

    def publish_benchmark(self, result: dict[str, Any], *, model: str, target: str, run_id: str) -> list[str]:
        """PutMetricData for one benchmark result; returns the metric names published."""
        data = benchmark_metric_data(result, model=model, target=target, run_id=run_id)
        if data:
            self.conn.put_metric_data(Namespace=NAMESPACE, MetricData=data)
        self.log.info("Published %d benchmark metrics to CloudWatch %s for run %s", len(data), NAMESPACE, run_id)
        return [d["MetricName"] for d in data]
