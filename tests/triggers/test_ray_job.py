"""RayJobFinishedTrigger against a Ray Jobs REST stand-in: the job's life as the dashboard reports it
(``GET /api/jobs/<id>``, ray.job_submission's JobDetails fields), a dashboard hiccup, a refused token."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from raylift.triggers.ray_job import RayJobFinishedTrigger
from tests.fixtures.http_standin import JsonHandler, serve_http

JOB = "raysubmit_Xq3cT8a1bZ"


@pytest.fixture()
def dashboard() -> Iterator[tuple[str, list[object]]]:
    """Answers GET /api/jobs/<JOB> from ``script``, one entry per poll (the last repeats): a status string,
    or an int for an HTTP error status."""
    script: list[object] = []
    polls: list[object] = []

    class Jobs(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != f"/api/jobs/{JOB}":
                self.send_error(404)
                return
            step = script[min(len(polls), len(script) - 1)]
            polls.append(step)
            if isinstance(step, int):
                self.send_response(step)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self._json({"type": "SUBMISSION", "submission_id": JOB, "status": step, "message": f"Job is {step}"})

    with serve_http(Jobs) as port:
        yield f"http://127.0.0.1:{port}", script


def trigger(url: str, timeout_s: float = 10.0) -> RayJobFinishedTrigger:
    return RayJobFinishedTrigger(url, JOB, timeout_s=timeout_s, poll_interval_s=0.05)


def test_waits_through_pending_running_and_a_503_until_the_job_ends(dashboard: tuple[str, list[object]]) -> None:
    url, script = dashboard
    script[:] = ["PENDING", "RUNNING", 503, "RUNNING", "FAILED"]
    event = trigger(url).wait()
    assert (event["status"], event["job_status"], event["job_message"]) == ("success", "FAILED", "Job is FAILED")
    script[:] = ["PENDING", "SUCCEEDED"]  # and the triggerer's form of the same wait

    async def first_event() -> dict:
        async for fired in trigger(url).run():
            return fired.payload
        raise AssertionError("no event")

    assert asyncio.run(first_event())["job_status"] == "SUCCEEDED"


def test_a_job_that_never_ends_times_out_naming_its_status(dashboard: tuple[str, list[object]]) -> None:
    url, script = dashboard
    script[:] = ["RUNNING"]
    event = trigger(url, timeout_s=0.3).wait()
    assert event["status"] == "timeout" and f"Ray job {JOB}" in event["message"] and "job RUNNING" in event["message"]


def test_a_refused_token_fails_at_once(dashboard: tuple[str, list[object]]) -> None:
    url, script = dashboard
    script[:] = [401]
    event = trigger(url, timeout_s=30).wait()
    assert event["status"] == "failed" and event["reason"] == "auth", event
