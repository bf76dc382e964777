"""The run record: secrets are redacted, the cold start's timestamps are not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from raylift.run_record import build_record


def test_secrets_are_redacted_and_the_cold_start_timestamps_kept() -> None:
    """A first token's time is not a token: the local pipeline run found it written as '***'."""
    trigger = datetime(2026, 11, 24, 21, 22, 45, tzinfo=UTC)
    running, first = trigger + timedelta(seconds=58.3), trigger + timedelta(seconds=58.6)
    record = build_record(
        run_id="manual__1", target="local", triggered_at=trigger,
        params={"hf_token": "hf_abc", "target_options": {"aws_secret_access_key": "s3cr3t"}},
        parts={"deployed": {"running_at": running.isoformat()},
               "smoke": {"stream": {"first_token_at": first.isoformat(), "usage": {"completion_tokens": 8}}}},
    )
    assert record["params"]["hf_token"] == "***"
    assert record["params"]["target_options"]["aws_secret_access_key"] == "***"
    assert record["smoke"]["stream"]["first_token_at"] == first.isoformat()
    assert record["smoke"]["stream"]["usage"]["completion_tokens"] == 8
    assert record["cold_start"] == {
        "triggered_at": trigger.isoformat(), "running_at": running.isoformat(), "first_token_at": first.isoformat(),
        "trigger_to_running_s": 58.3, "trigger_to_first_token_s": 58.6,
    }


def test_a_run_that_never_got_running_has_no_cold_start_figures() -> None:
    record = build_record(run_id="manual__2", target="local", params={}, parts={"deployed": None, "smoke": None},
                          triggered_at=datetime(2026, 11, 24, tzinfo=UTC))
    assert record["cold_start"]["trigger_to_running_s"] is None
    assert record["cold_start"]["trigger_to_first_token_s"] is None


def test_secrets_are_redacted_by_value_whatever_their_key() -> None:
    """Issue 57: redaction went by key name only, so an ``Authorization`` header, a URL's ``user:pw@`` and a bearer
    token under an innocent key reached the shared record."""
    from airflow.sdk.log import mask_secret

    mask_secret("conn-password-registered-by-a-hook")  # what a task's connection lookup registers with Airflow
    record = build_record(
        run_id="manual__3", target="ray", params={
            "model_id": "org/model",
            "engine_args": {"headers": {"Authorization": "Bearer abcdefghijkl"}},
            "model_source": "https://user:pw@hub.example.com/org/model",
            "mirror": "https://ghp0123456789@git.example.com/x.git",
            "note": "sent with bearer tok_0123456789",
            "hub": "hf_" + "a1B2" * 9,
            "extra": ["keep me", "uses conn-password-registered-by-a-hook inside"],
            "revision": "main",
        },
        parts={"deployed": {"endpoint": "http://127.0.0.1:8000/v1"}},
    )
    params = record["params"]
    assert params["engine_args"]["headers"]["Authorization"] == "***"
    assert params["model_source"] == params["mirror"] == params["note"] == params["hub"] == "***"
    assert params["extra"] == ["keep me", "***"]
    assert (params["model_id"], params["revision"]) == ("org/model", "main")  # nothing else touched
    assert record["endpoint"] == "http://127.0.0.1:8000/v1"  # a URL without userinfo is kept
    assert "pw@" not in str(record) and "abcdefghijkl" not in str(record)
