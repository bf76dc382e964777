"""The polling triggers' one error policy, against real HTTP on 127.0.0.1, in both forms of the one loop:
``run()`` (the triggerer) and ``wait()`` (an operator that does not defer).

Passing failures (5xx, 429, a refused connection) are retried and named when the deadline comes; a refused
token (401/403) or any other error (404) fails at once; a definitive Serve state fails at once too.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from raylift.triggers.polling import PollingTrigger
from raylift.triggers.serve import ServeApplicationsTrigger
from tests.fixtures.http_standin import JsonHandler, serve_http

SUBMITTED = 1000.0


def app(status: str, message: str = "") -> tuple[int, dict[str, Any]]:
    """A 200 answer of ``GET /api/serve/applications/`` with app ``llm`` in ``status``, deployed after SUBMITTED."""
    return 200, {"applications": {"llm": {"status": status, "message": message, "last_deployed_time_s": SUBMITTED + 1}}}


class Script:
    """The answers a dashboard stand-in gives, in order (the last one repeats), and how many GETs it got."""

    def __init__(self, *answers: tuple[int, dict[str, Any] | None]) -> None:
        self.answers = list(answers)
        self.gets = 0
        self.lock = threading.Lock()

    def next(self) -> tuple[int, dict[str, Any] | None]:
        with self.lock:
            self.gets += 1
            return self.answers[min(self.gets, len(self.answers)) - 1]


@pytest.fixture()
def dashboard(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Script, str]]:
    """A Ray dashboard stand-in answering from a Script the test fills; yields it and its URL."""
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    script = Script()

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802  (http.server's name)
            status, body = script.next()
            data = json.dumps(body).encode() if body is not None else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    with serve_http(Handler) as port:
        yield script, f"http://127.0.0.1:{port}"


def serve_trigger(url: str, timeout_s: float = 10.0) -> ServeApplicationsTrigger:
    return ServeApplicationsTrigger(url, ["llm"], submitted_at=SUBMITTED, timeout_s=timeout_s, poll_interval_s=0.05)


def first_event(trigger: PollingTrigger, form: str) -> tuple[dict[str, Any], float]:
    """The trigger's one event through ``run()`` or ``wait()``, and the seconds it took."""
    started = time.monotonic()
    if form == "wait":
        event = trigger.wait()
    else:

        async def collect() -> list[dict[str, Any]]:
            return [e.payload async for e in trigger.run()]

        (event,) = asyncio.run(asyncio.wait_for(collect(), timeout=60))
    assert time.time() - 60 < event.pop("seen_at") <= time.time()
    return event, time.monotonic() - started


FORMS = pytest.mark.parametrize("form", ["run", "wait"])


@FORMS
def test_503_twice_then_running_succeeds(dashboard: tuple[Script, str], form: str) -> None:
    script, url = dashboard
    script.answers = [(503, None), (503, None), app("RUNNING")]
    event, _ = first_event(serve_trigger(url), form)
    assert event["status"] == "success" and event["apps"] == {"llm": "RUNNING"}, event
    assert event["message"]
    assert script.gets == 3  # both 503s were retried, and it stopped at RUNNING


@FORMS
def test_429_is_retried(dashboard: tuple[Script, str], form: str) -> None:
    script, url = dashboard
    script.answers = [(429, None), app("DEPLOYING"), app("RUNNING")]
    event, _ = first_event(serve_trigger(url), form)
    assert event["status"] == "success" and script.gets == 3, event


@FORMS
def test_401_fails_at_once(dashboard: tuple[Script, str], form: str) -> None:
    script, url = dashboard
    script.answers = [(401, None), app("RUNNING")]
    event, seconds = first_event(serve_trigger(url, timeout_s=30), form)
    assert event["status"] == "failed" and event["reason"] == "auth", event
    assert "requires a token" in event["message"]
    assert script.gets == 1 and seconds < 10  # not retried, not the 30 s deadline


@FORMS
def test_403_fails_at_once(dashboard: tuple[Script, str], form: str) -> None:
    script, url = dashboard
    script.answers = [(403, None)]
    event, _ = first_event(serve_trigger(url, timeout_s=30), form)
    assert event["status"] == "failed" and event["reason"] == "auth" and script.gets == 1, event


@FORMS
def test_an_error_that_is_not_passing_fails_at_once_naming_it(dashboard: tuple[Script, str], form: str) -> None:
    script, url = dashboard
    script.answers = [(404, None), app("RUNNING")]  # wrong dashboard URL: waiting will not fix it
    event, _ = first_event(serve_trigger(url, timeout_s=30), form)
    assert event["status"] == "failed" and "HTTP 404" in event["message"] and script.gets == 1, event


@FORMS
def test_deploy_failed_fails_at_once_with_serves_message(dashboard: tuple[Script, str], form: str) -> None:
    script, url = dashboard
    script.answers = [app("DEPLOYING"), app("DEPLOY_FAILED", "RuntimeError: boom"), app("RUNNING")]
    event, _ = first_event(serve_trigger(url), form)
    assert event["status"] == "failed" and event["message"] == "RuntimeError: boom" and script.gets == 2, event


@FORMS
def test_never_ready_times_out_naming_the_last_status(dashboard: tuple[Script, str], form: str) -> None:
    script, url = dashboard
    script.answers = [app("DEPLOYING")]
    event, seconds = first_event(serve_trigger(url, timeout_s=0.5), form)
    assert event["status"] == "timeout", event
    assert "not ready after 0.5s" in event["message"] and "llm=DEPLOYING" in event["message"], event
    assert event["apps"] == {"llm": "DEPLOYING"}
    assert "last error" not in event["message"]
    assert 0.5 <= seconds < 5  # (how many polls fit in 0.5 s depends on the machine's load)


@FORMS
def test_a_dashboard_down_to_the_deadline_times_out_naming_the_last_error(
    dashboard: tuple[Script, str], form: str
) -> None:
    script, url = dashboard
    script.answers = [app("DEPLOYING"), (503, None)]
    # 5 s: room for a poll after the first on a busy box (with 2 s, the first poll alone outlasted the deadline once,
    # under the IAM test's recording run beside the heavy part, and the event had no error to name)
    event, _ = first_event(serve_trigger(url, timeout_s=5.0), form)
    assert event["status"] == "timeout", event
    assert "llm=DEPLOYING" in event["message"] and "last error: HTTP 503 Service Unavailable" in event["message"]


@FORMS
def test_a_refused_connection_is_retried_until_the_deadline(form: str) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    event, _ = first_event(serve_trigger(f"http://127.0.0.1:{port}", timeout_s=0.5), form)
    assert event["status"] == "timeout", event
    assert "no answer yet" in event["message"] and "last error: ConnectError" in event["message"], event


@FORMS
def test_an_answer_it_cannot_read_fails_at_once_naming_it(dashboard: tuple[Script, str], form: str) -> None:
    script, url = dashboard
    script.answers = [(200, {"applications": {"llm": {"status": "RUNNING", "last_deployed_time_s": "yesterday"}}})]
    event, _ = first_event(serve_trigger(url, timeout_s=30), form)
    assert event["status"] == "failed" and "cannot read the answer (ValueError" in event["message"], event
    assert script.gets == 1
