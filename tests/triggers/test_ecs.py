"""EcsServicesRunningTrigger against moto: waits for running counts, times out naming what lags."""

from __future__ import annotations

import asyncio
import json

import boto3
import pytest

from raylift.triggers.ecs import EcsServicesRunningTrigger
from tests.aws.moto_resources import ecs_cluster
from tests.aws.standins import proxy_to, throttle_first


def first_event(trigger: EcsServicesRunningTrigger) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(first(), timeout=30))


def test_serialize_round_trip() -> None:
    trigger = EcsServicesRunningTrigger("ray", ["ray-worker", "ray-head"], region_name="us-west-2", waiter_max_attempts=6)
    path, kwargs = trigger.serialize()
    assert path == "raylift.triggers.ecs.EcsServicesRunningTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs
    assert EcsServicesRunningTrigger(**kwargs).serialize() == (path, kwargs)


def test_times_out_then_succeeds_once_tasks_run(aws: str) -> None:
    ecs_cluster("ray", {"ray-head": 1, "ray-worker": 2})  # moto starts services with 0 running
    want = {"ray-head": 1, "ray-worker": 2}
    event = first_event(EcsServicesRunningTrigger("ray", list(want), waiter_delay=0.05, waiter_max_attempts=4))
    assert event["status"] == "timeout"
    assert "ray-head 0/1 running" in event["message"] and "ray-worker 0/2 running" in event["message"]

    ecs = boto3.client("ecs")
    for name, count in want.items():
        ecs.update_service(cluster="ray", service=name, desiredCount=count)  # moto: running follows desired
    event = first_event(EcsServicesRunningTrigger("ray", list(want), waiter_delay=0.05, waiter_max_attempts=100))
    assert event["status"] == "success"
    assert event["services"]["ray-worker"] == {"running": 2, "desired": 2, "pending": 0}


def test_missing_service_is_an_error_event(aws: str) -> None:
    ecs_cluster("ray", {"ray-head": 0})
    event = first_event(EcsServicesRunningTrigger("ray", ["ray-gone"], waiter_delay=0.05, waiter_max_attempts=20))
    assert event["status"] == "failed" and "ray-gone" in event["message"]


def running_services(want: dict[str, int]) -> None:
    ecs_cluster("ray", want)
    for name, count in want.items():
        boto3.client("ecs").update_service(cluster="ray", service=name, desiredCount=count)  # moto: running follows


def test_throttled_polls_are_retried_until_services_run(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    running_services({"ray-head": 1, "ray-worker": 2})
    with proxy_to(aws) as proxy:
        proxy.rule = throttle_first(".DescribeServices", 3)
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries off: each throttle reaches the waiter
        event = first_event(
            EcsServicesRunningTrigger("ray", ["ray-head", "ray-worker"], waiter_delay=0.01, waiter_max_attempts=5)
        )
    assert [status for _, _, status in proxy.seen] == [400, 400, 400, 200]  # three throttled polls, then moto
    assert event["status"] == "success"
    assert event["services"]["ray-worker"] == {"running": 2, "desired": 2, "pending": 0}
