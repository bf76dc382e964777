"""The benchmark step's figures reach CloudWatch on AWS targets: published through the target, read back from
the moto server with the test's own client (GetMetricData), the way the dashboard reads them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from raylift.hooks.cloudwatch import BENCHMARK_METRICS, NAMESPACE
from raylift.targets import get_target

RESULT = {"overall": {"ttft_ms": {"p50": 120.5, "p99": 480.0}, "itl_ms": {"p50": 21.0},
                      "output_tokens_per_s": 950.0, "error_rate": 0.0}}
OPTIONS: dict[str, dict[str, Any]] = {
    "ecs": {"cluster": "ray", "bucket": "raylift-models", "head_address": "127.0.0.1"},
    "eks": {"cluster_name": "ray", "worker_nodegroup": "gpu", "bucket": "raylift-models"},
}


def read_back(target: str, run_id: str) -> dict[str, list[float]]:
    dims = [{"Name": "Model", "Value": "tiny"}, {"Name": "Target", "Value": target}, {"Name": "RunId", "Value": run_id}]
    now = datetime.now(UTC)
    reply = boto3.client("cloudwatch").get_metric_data(
        MetricDataQueries=[
            {"Id": f"m{i}", "Label": name, "MetricStat": {
                "Metric": {"Namespace": NAMESPACE, "MetricName": name, "Dimensions": dims}, "Period": 60, "Stat": "Average"}}
            for i, name in enumerate(BENCHMARK_METRICS)
        ],
        StartTime=now - timedelta(minutes=5), EndTime=now + timedelta(minutes=5),
    )
    return {r["Label"]: list(r["Values"]) for r in reply["MetricDataResults"] if r.get("Values")}


@pytest.mark.parametrize("name", ["ecs", "eks"])
def test_aws_targets_publish_the_benchmark_to_cloudwatch(aws: str, name: str) -> None:
    target = get_target(name, **OPTIONS[name])
    sent = target.publish_benchmark(RESULT, model="tiny", run_id=f"{name}-run")
    assert sent == list(BENCHMARK_METRICS)
    assert read_back(name, f"{name}-run") == {
        "TimeToFirstTokenP50": [120.5], "TimeToFirstTokenP99": [480.0], "InterTokenLatencyP50": [21.0],
        "OutputTokensPerSecond": [950.0], "ErrorRate": [0.0],
    }


def test_the_local_target_publishes_nothing() -> None:
    assert get_target("local").publish_benchmark(RESULT, model="tiny", run_id="r") == []
