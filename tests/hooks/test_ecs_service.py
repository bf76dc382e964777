"""ECS service scaling against moto: desiredCount, or min/max capacity when autoscaled."""

from __future__ import annotations

import boto3
import pytest

from raylift.errors import ClusterError
from raylift.hooks.ecs_service import EcsServiceHook, resource_id
from tests.aws.moto_resources import ecs_cluster
from tests.aws.standins import proxy_to, throttle_first


def test_scale_by_desired_count_and_wait(aws: str) -> None:
    ecs_cluster("ray", {"ray-head": 0, "ray-worker": 0})
    hook = EcsServiceHook(aws_conn_id="aws_default")
    assert hook.scale_service("ray", "ray-head", 1) == "desired_count"
    assert hook.scale_service("ray", "ray-worker", 2) == "desired_count"
    hook.wait_for_services("ray", ["ray-head", "ray-worker"], waiter_delay=1, waiter_max_attempts=2)
    counts = hook.service_counts("ray", ["ray-head", "ray-worker"])
    assert (counts["ray-head"].desired, counts["ray-worker"].desired) == (1, 2)
    assert counts["ray-worker"].reached(2) and not counts["ray-worker"].reached(3)


def test_wait_names_services_that_lag(aws: str) -> None:
    ecs_cluster("ray", {"ray-worker": 2})  # moto: created services start with 0 running
    with pytest.raises(ClusterError, match="ray-worker 0/2 running"):
        EcsServiceHook(aws_conn_id="aws_default").wait_for_services("ray", ["ray-worker"], waiter_delay=1, waiter_max_attempts=1)


def test_autoscaled_service_changes_capacity_not_desired_count(aws: str) -> None:
    ecs_cluster("ray", {"ray-head": 1, "ray-worker": 1})
    aas = boto3.client("application-autoscaling")
    aas.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId=resource_id("ray", "ray-worker"),
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=1,
        MaxCapacity=6,
    )
    hook = EcsServiceHook(aws_conn_id="aws_default")
    assert hook.scale_service("ray", "ray-worker", 2) == "autoscaling"
    target = hook.scalable_target("ray", "ray-worker")
    assert (target["MinCapacity"], target["MaxCapacity"]) == (2, 6)
    assert hook.service_counts("ray", ["ray-worker"])["ray-worker"].desired == 1  # left to the autoscaler
    hook.scale_service("ray", "ray-worker", 0)
    target = hook.scalable_target("ray", "ray-worker")
    assert (target["MinCapacity"], target["MaxCapacity"]) == (0, 0)


def test_missing_service_is_a_cluster_error(aws: str) -> None:
    ecs_cluster("ray", {"ray-head": 0})
    with pytest.raises(ClusterError, match="has no service"):
        EcsServiceHook(aws_conn_id="aws_default").service_counts("ray", ["ray-head", "ray-gone"])


def test_wait_retries_throttled_polls(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ecs_cluster("ray", {"ray-head": 0, "ray-worker": 0})
    hook = EcsServiceHook(aws_conn_id="aws_default")
    hook.scale_service("ray", "ray-head", 1)
    hook.scale_service("ray", "ray-worker", 2)
    with proxy_to(aws) as proxy:
        proxy.rule = throttle_first(".DescribeServices", 3)
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries off: each throttle reaches the waiter
        EcsServiceHook(aws_conn_id="aws_default").wait_for_services(
            "ray", ["ray-head", "ray-worker"], waiter_delay=0.01, waiter_max_attempts=5
        )
    assert [status for _, _, status in proxy.seen] == [400, 400, 400, 200]  # three throttled polls, then moto
