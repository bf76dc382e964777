"""CodeBuildBuildTrigger: one event per build, polled without blocking the loop.

moto's CodeBuild reports SUCCEEDED on the first BatchGetBuilds and never FAILED, so the failure and
timeout paths replay recorded BatchGetBuilds replies (tests/aws/fixtures/codebuild) through an HTTP
stand-in in front of moto; StartBuild itself still goes to moto.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from airflow.triggers.base import BaseTrigger

from raylift.hooks.codebuild import CodeBuildHook
from raylift.triggers.codebuild import CodeBuildBuildTrigger
from tests.aws.moto_resources import codebuild_project
from tests.aws.standins import json_reply, proxy_to, throttle_first

FIXTURES = Path(__file__).resolve().parents[1] / "aws" / "fixtures" / "codebuild"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm:abc"


def events(trigger: BaseTrigger) -> list[dict]:
    async def collect() -> list[dict]:
        return [event.payload async for event in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), timeout=30))


def test_serialize_round_trip() -> None:
    trigger = CodeBuildBuildTrigger("p:1", IMAGE, region_name="us-west-2", waiter_delay=5, waiter_max_attempts=12)
    path, kwargs = trigger.serialize()
    assert path == "raylift.triggers.codebuild.CodeBuildBuildTrigger"
    json.dumps(kwargs)
    assert CodeBuildBuildTrigger(**kwargs).serialize() == (path, kwargs)


def test_succeeded_build_against_moto(aws: str) -> None:
    build_id = started_build()
    [event] = events(CodeBuildBuildTrigger(build_id, IMAGE, waiter_delay=0.01))
    assert event["status"] == "success" and event["image"] == IMAGE and event["build_id"] == build_id


def started_build() -> str:
    """A build moto has started (moto reports it SUCCEEDED on the first BatchGetBuilds)."""
    codebuild_project()
    return CodeBuildHook(aws_conn_id="aws_default").start_image_build(
        "raylift-image", image_repo_uri=IMAGE.split(":")[0], image_tag="abc", dockerfile="images/ray-vllm/Dockerfile"
    )


def test_throttled_polls_are_retried_until_the_build_succeeds(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    build_id = started_build()
    with proxy_to(aws) as proxy:
        proxy.rule = throttle_first(".BatchGetBuilds", 3)
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries off: each throttle reaches the waiter
        [event] = events(CodeBuildBuildTrigger(build_id, IMAGE, waiter_delay=0.01, waiter_max_attempts=5))
    assert [status for _, _, status in proxy.seen] == [400, 400, 400, 200]  # three throttled polls, then moto
    assert event["status"] == "success" and event["build_id"] == build_id


def test_throttling_that_never_stops_ends_in_a_timeout(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Throttled polls count as attempts, so the wait still ends (the provider alone would retry forever)."""
    build_id = started_build()
    with proxy_to(aws) as proxy:
        proxy.rule = throttle_first(".BatchGetBuilds", -1)
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        [event] = events(CodeBuildBuildTrigger(build_id, IMAGE, waiter_delay=0.01, waiter_max_attempts=3))
    assert [status for _, _, status in proxy.seen] == [400, 400, 400]
    assert event["status"] == "timeout" and build_id in event["message"]


def test_failed_build_event_names_phase_reason_and_logs(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    replies = [json.loads((FIXTURES / n).read_text()) for n in ("in_progress.json", "in_progress.json", "failed_build.json")]
    with proxy_to(aws) as proxy:
        proxy.rule = lambda method, target: json_reply(replies.pop(0)) if target.endswith(".BatchGetBuilds") else None
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        found = events(CodeBuildBuildTrigger("raylift-image:6f1a", IMAGE, waiter_delay=0.01))
    assert replies == []
    [event] = found
    assert event["status"] == "failed" and event["build_status"] == "FAILED"
    assert event["phase"] == "BUILD"
    assert "exit status 1" in event["reason"]
    assert event["logs_url"].startswith("https://console.aws.amazon.com/cloudwatch/home?region=us-west-2#logsV2")


def test_timeout_event_names_the_phase(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reply = json.loads((FIXTURES / "in_progress.json").read_text())
    with proxy_to(aws) as proxy:
        proxy.rule = lambda method, target: json_reply(reply) if target.endswith(".BatchGetBuilds") else None
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        [event] = events(CodeBuildBuildTrigger("raylift-image:6f1a", IMAGE, waiter_delay=0.05, waiter_max_attempts=4))
    assert event["status"] == "timeout"
    assert "still in phase BUILD" in event["message"]


def test_unknown_build_is_an_error_event(aws: str) -> None:
    [event] = events(CodeBuildBuildTrigger("raylift-image:none", IMAGE, waiter_delay=0.01))
    assert event["status"] == "failed" and "no build" in event["message"]
