"""The local target's deploy wait counts a deploy Serve stamped while a slow PUT was still answering."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from raylift.targets.local import LocalTarget
from tests.fixtures.http_standin import JsonHandler, serve_http


@pytest.fixture()
def slow_dashboard() -> Iterator[int]:
    """A Serve REST API that stamps a deploy on receipt, answers the PUT 2.5 s later, and reports the app
    DEPLOY_FAILED (as Serve does when the new version raises at start)."""
    state: dict[str, Any] = {"applications": {}}

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            self._json({"applications": state["applications"]})

        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            state["applications"] = {"llm": {"status": "DEPLOY_FAILED", "message": "RuntimeError: boom",
                                             "last_deployed_time_s": time.time(), "deployments": {}}}
            time.sleep(2.5)  # a busy head: the answer comes seconds after Serve took the config
            self._json({})

    with serve_http(Handler) as port:
        yield port


def test_a_failed_deploy_is_seen_even_when_the_put_answers_late(slow_dashboard: int,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYLIFT_DASHBOARD_PORT", str(slow_dashboard))
    target = LocalTarget()
    target.apply_serve_config({"applications": [{"name": "llm", "import_path": "llm.app:build_app"}]})
    trigger = target.deploy_trigger(app_names=["llm"], timeout_s=5)

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        return {}

    event = asyncio.run(first_event())
    assert event["status"] == "failed" and "RuntimeError: boom" in event["message"], event
