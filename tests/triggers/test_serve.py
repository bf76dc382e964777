"""ServeApplicationsTrigger: decisions on real-shaped dashboard payloads, and its serialisation."""

from __future__ import annotations

from raylift.triggers.serve import ServeApplicationsTrigger


def trig(**kw: object) -> ServeApplicationsTrigger:
    return ServeApplicationsTrigger(dashboard_url="http://127.0.0.1:1", app_names=["llm"], submitted_at=1000.0, **kw)


def payload(status: str, deployed_at: float, message: str = "") -> dict:
    return {"applications": {"llm": {"status": status, "message": message, "last_deployed_time_s": deployed_at}}}


def test_previous_version_running_does_not_count() -> None:
    assert trig().evaluate(payload("RUNNING", deployed_at=900.0)) is None


def test_new_version_running_succeeds() -> None:
    assert trig().evaluate(payload("RUNNING", deployed_at=1000.5)) == {"status": "success", "apps": {"llm": "RUNNING"}}


def test_deploy_failed_carries_serves_message() -> None:
    event = trig().evaluate(payload("DEPLOY_FAILED", 1001.0, "RuntimeError: boom"))
    assert event == {"status": "failed", "app": "llm", "app_status": "DEPLOY_FAILED", "message": "RuntimeError: boom"}


def test_missing_app_keeps_waiting() -> None:
    assert trig().evaluate({"applications": {}}) is None


def test_serialize_round_trip() -> None:
    path, kwargs = trig(timeout_s=5.0).serialize()
    assert path == "raylift.triggers.serve.ServeApplicationsTrigger"
    again = ServeApplicationsTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_failure_message_includes_the_deployments_own_error() -> None:
    body = payload("DEPLOY_FAILED", 1001.0, "Failed to update the deployments ['LLMServer'].")
    body["applications"]["llm"]["deployments"] = {
        "LLMServer": {"status": "DEPLOY_FAILED", "message": "RuntimeError: deliberately broken app"}
    }
    event = trig().evaluate(body)
    assert event is not None and "LLMServer: RuntimeError: deliberately broken app" in event["message"]


def test_a_refused_token_fails_at_once_instead_of_waiting_for_the_deadline(monkeypatch) -> None:
    import asyncio
    import time

    from tests.fixtures.http_standin import JsonHandler, serve_http

    class Refusing(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802  (http.server's name)
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)

    async def first_event(url: str) -> tuple[dict, float]:
        t0 = time.monotonic()
        trigger = ServeApplicationsTrigger(url, ["llm"], submitted_at=0.0, timeout_s=30, poll_interval_s=0.2)
        async for event in trigger.run():
            return event.payload, time.monotonic() - t0
        raise AssertionError("no event")

    with serve_http(Refusing) as port:
        event, seconds = asyncio.run(first_event(f"http://127.0.0.1:{port}"))
    assert event["status"] == "failed" and "requires a token" in event["message"], event
    assert seconds < 10  # not the 30 s deadline


def test_removal_waits_while_the_app_is_listed_and_succeeds_once_it_is_not() -> None:
    from raylift.triggers.serve import ServeApplicationGoneTrigger

    gone = ServeApplicationGoneTrigger(dashboard_url="http://127.0.0.1:1", app_names=["llm"])
    assert gone.evaluate(payload("DELETING", deployed_at=900.0)) is None
    assert gone.progress(payload("DELETING", deployed_at=900.0)) == ("llm=DELETING", {"apps": {"llm": "DELETING"}})
    other = {"applications": {"chat": {"status": "RUNNING", "last_deployed_time_s": 1.0}}}
    assert gone.evaluate(other) == {"status": "success", "apps": {}}


def test_an_optional_app_ray_cannot_schedule_ends_the_wait_with_serves_message() -> None:
    """Serve's controller's own words for a replica Ray has not placed (Ray 2.60, deployment_state.py): the wait
    for an optional app (the canary's fresh baseline) ends on them; any other app's wait goes on to its bound."""
    body = payload("DEPLOYING", 1001.0)
    body["applications"]["llm"]["deployments"] = {"LLMServer": {"status": "UPDATING", "message": (
        "Deployment 'LLMServer' in application 'llm' has 1 replicas that have taken more than 30s to be scheduled. "
        "Resources required for each replica: {'CPU': 1.0}, total resources available: {'CPU': 0.5}.")}}
    assert trig().evaluate(body) is None
    event = trig(unscheduled_fails=True).evaluate(body)
    assert event is not None and event["status"] == "failed" and event["app_status"] == "UNSCHEDULED"
    assert "total resources available: {'CPU': 0.5}" in event["message"]
    body["applications"]["llm"]["deployments"]["LLMServer"]["message"] = ""  # still starting: keep waiting
    assert trig(unscheduled_fails=True).evaluate(body) is None
