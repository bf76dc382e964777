"""CodeBuild hook: BatchGetBuilds parsing (recorded replies) and StartBuild against moto."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raylift.errors import BuildError
from raylift.hooks.codebuild import BuildStatus, CodeBuildHook, build_outcome
from tests.aws.moto_resources import codebuild_project
from tests.aws.standins import proxy_to, throttle_first

FIXTURES = Path(__file__).resolve().parents[1] / "aws" / "fixtures" / "codebuild"


def recorded(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())["builds"][0]


def test_in_progress_build_is_not_done() -> None:
    outcome = build_outcome(recorded("in_progress.json"), "us-west-2")
    assert (outcome.status, outcome.current_phase, outcome.done) == (BuildStatus.IN_PROGRESS, "BUILD", False)
    assert outcome.reason is None


def test_failed_build_names_phase_reason_and_logs() -> None:
    outcome = build_outcome(recorded("failed_build.json"), "us-west-2")
    assert outcome.done and not outcome.succeeded
    assert outcome.failed_phase == "BUILD"
    assert outcome.reason.startswith("COMMAND_EXECUTION_ERROR: Error while executing command: docker build")
    assert outcome.logs_url.endswith("raylift-image/log-events/6f1a2b3c-0000-4d5e-8f90-123456789abc")
    message = outcome.failure_message()
    assert "ended FAILED in phase BUILD" in message and "exit status 1" in message and "Logs: https://" in message


def test_fault_without_deep_link_builds_one_from_group_and_stream() -> None:
    outcome = build_outcome(recorded("fault_provisioning.json"), "us-west-2")
    assert (outcome.status, outcome.failed_phase) == ("FAULT", "PROVISIONING")
    assert outcome.reason.startswith("ACCESS_DENIED: Service role")
    assert outcome.logs_url == (
        "https://console.aws.amazon.com/cloudwatch/home?region=us-west-2#logsV2:log-groups/log-group/"
        "$252Faws$252Fcodebuild$252Fraylift-image/log-events/6f1a2b3c-0000-4d5e-8f90-123456789abc"
    )


def test_start_build_sends_image_overrides(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    codebuild_project()
    with proxy_to(aws) as proxy:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        hook = CodeBuildHook(aws_conn_id="aws_default")
        build_id = hook.start_image_build(
            "raylift-image",
            image_repo_uri="123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm",
            image_tag="abc123",
            dockerfile="images/ray-vllm/Dockerfile",
        )
        sent = json.loads(next(body for target, body in proxy.bodies if target.endswith(".StartBuild")))
        # moto completes every build on the first poll: the success path end to end.
        hook.wait_for_build(build_id, waiter_delay=0.01)
    assert build_id.startswith("raylift-image:")
    overrides = {e["name"]: e["value"] for e in sent["environmentVariablesOverride"]}
    assert overrides == {
        "IMAGE_REPO_URI": "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm",
        "IMAGE_TAG": "abc123",
        "DOCKERFILE": "images/ray-vllm/Dockerfile",
        "BUILD_CONTEXT": ".",
    }


def test_missing_project_is_a_build_error(aws: str) -> None:
    with pytest.raises(BuildError, match="CodeBuild refused to start project 'nope'"):
        CodeBuildHook(aws_conn_id="aws_default").start_image_build(
            "nope", image_repo_uri="r", image_tag="t", dockerfile="d"
        )


def test_wait_for_failed_build_raises_with_phase(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.aws.standins import json_reply

    replies = [json.loads((FIXTURES / n).read_text()) for n in ("in_progress.json", "failed_build.json")]
    with proxy_to(aws) as proxy:
        proxy.rule = lambda method, target: json_reply(replies.pop(0)) if target.endswith(".BatchGetBuilds") else None
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        with pytest.raises(BuildError, match="ended FAILED in phase BUILD: COMMAND_EXECUTION_ERROR"):
            CodeBuildHook(aws_conn_id="aws_default").wait_for_build("raylift-image:x", waiter_delay=0.01)
    assert replies == []  # both recorded replies were consumed: it polled past IN_PROGRESS


def test_wait_retries_throttled_polls(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    codebuild_project()
    build_id = CodeBuildHook(aws_conn_id="aws_default").start_image_build(
        "raylift-image", image_repo_uri="r", image_tag="t", dockerfile="d"
    )
    with proxy_to(aws) as proxy:
        proxy.rule = throttle_first(".BatchGetBuilds", 3)
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # botocore's own retries off: each throttle reaches the waiter
        CodeBuildHook(aws_conn_id="aws_default").wait_for_build(build_id, waiter_delay=0.01, waiter_max_attempts=5)
    assert [status for _, _, status in proxy.seen] == [400, 400, 400, 200]  # three throttled polls, then moto
