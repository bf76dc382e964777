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
