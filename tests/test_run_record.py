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
