"""Benchmark results as CloudWatch custom metrics: put, then read back with GetMetricData (moto)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3

from raylift.hooks.cloudwatch import BENCHMARK_METRICS, NAMESPACE, BenchmarkMetricsHook, benchmark_metric_data


def read_back(*, model: str, target: str, run_id: str, start: datetime, end: datetime) -> dict[str, list[float]]:
    """GetMetricData for every benchmark metric of one run, with the test's own client (not raylift's code)."""
    dims = [{"Name": "Model", "Value": model}, {"Name": "Target", "Value": target}, {"Name": "RunId", "Value": run_id}]
    queries = [
        {"Id": f"m{i}", "Label": name,
         "MetricStat": {"Metric": {"Namespace": NAMESPACE, "MetricName": name, "Dimensions": dims}, "Period": 60, "Stat": "Average"}}
        for i, name in enumerate(BENCHMARK_METRICS)
    ]
    reply = boto3.client("cloudwatch").get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=end)
    return {r["Label"]: list(r.get("Values", [])) for r in reply["MetricDataResults"] if r.get("Values")}


RESULT = {
    "overall": {
        "ttft_ms": {"p50": 120.5, "p99": 480.0},
        "itl_ms": {"p50": 21.0},
        "output_tokens_per_s": 950.0,
        "error_rate": 0.0,
    }
}


def test_publish_and_read_back(aws: str) -> None:
    hook = BenchmarkMetricsHook(aws_conn_id="aws_default")
    names = hook.publish_benchmark(RESULT, model="tiny", target="ecs", run_id="run-1")
    assert names == [
        "TimeToFirstTokenP50",
        "TimeToFirstTokenP99",
        "InterTokenLatencyP50",
        "OutputTokensPerSecond",
        "ErrorRate",
    ]
    now = datetime.now(UTC)
    got = read_back(model="tiny", target="ecs", run_id="run-1", start=now - timedelta(minutes=5), end=now + timedelta(minutes=5))
    assert got["TimeToFirstTokenP99"] == [480.0]
    assert got["OutputTokensPerSecond"] == [950.0]
    assert got["ErrorRate"] == [0.0]
    listed = boto3.client("cloudwatch").list_metrics(Namespace=NAMESPACE, MetricName="TimeToFirstTokenP50")
    [metric] = listed["Metrics"]
    assert {d["Name"]: d["Value"] for d in metric["Dimensions"]} == {"Model": "tiny", "Target": "ecs", "RunId": "run-1"}


def test_missing_and_non_finite_values_are_left_out() -> None:
    data = benchmark_metric_data(
        {"overall": {"ttft_ms": {"p50": float("nan")}, "output_tokens_per_s": 10, "error_rate": True}},
        model="m",
        target="local",
        run_id="r",
    )
    assert [(d["MetricName"], d["Value"], d["Unit"]) for d in data] == [("OutputTokensPerSecond", 10.0, "Count/Second")]
