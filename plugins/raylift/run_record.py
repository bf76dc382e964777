"""The run record: artifact, model + checksums, Serve config (+hash), endpoint, smoke and benchmark in one JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from raylift.serve.config import config_hash

SECRET_HINTS = ("token", "secret", "password", "key", "credential")


def _looks_secret(key: str) -> bool:
    """A key naming a secret (``hf_token``, ``aws_secret_access_key``); ``*_at`` keys are timestamps
    (``first_token_at`` is when the first token came, not a token)."""
    key = key.lower()
    return not key.endswith("_at") and any(h in key for h in SECRET_HINTS)


def redact(value: Any) -> Any:
    """Drop values whose key looks like a secret; records are meant to be shared."""
    if isinstance(value, dict):
        return {k: ("***" if _looks_secret(k) and isinstance(v, str) else redact(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def _at(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if isinstance(value, str) else value
    except ValueError:
        return None


def cold_start(triggered_at: datetime | None, parts: dict[str, Any]) -> dict[str, Any]:
    """How long this run took from its trigger to a RUNNING app and to the first streamed token.

    ``triggered_at`` is the run's ``run_after`` (the trigger time for a UI/REST trigger, the scheduled
    time for a scheduled run); RUNNING is when the deploy's wait saw it, the first token is the smoke
    test's streamed request. A step that did not get there leaves its figure ``None``.

    ``replicas`` (when the deploy read them): each replica the deploy started, by phase (``raylift.serve.cold_start``);
    ``deploy_steps_s``: the deploy step's own phases (fit check, engine-args check, config write) and Serve's, from
    the write to RUNNING;
    ``first_token_s`` (when measured): the smoke test's streamed request, sent to first token.
    """
    deployed = parts.get("deployed") or {}
    stream = (parts.get("smoke") or {}).get("stream") or {}
    running_at = _at(deployed.get("running_at"))
    first_token_at = _at(stream.get("first_token_at"))

    def since_trigger(moment: datetime | None) -> float | None:
        return round((moment - triggered_at).total_seconds(), 1) if moment and triggered_at else None

    timings: dict[str, Any] = {
        "triggered_at": triggered_at.isoformat() if triggered_at else None,
        "running_at": running_at.isoformat() if running_at else None,
        "first_token_at": first_token_at.isoformat() if first_token_at else None,
        "trigger_to_running_s": since_trigger(running_at),
        "trigger_to_first_token_s": since_trigger(first_token_at),
    }
    if stream.get("ttft_s") is not None:
        timings["first_token_s"] = stream["ttft_s"]
    if isinstance(deployed.get("cold_start"), dict):  # a deploy that read its replicas (absent before)
        timings["replicas"] = list(deployed["cold_start"].get("replicas") or [])
        if deployed["cold_start"].get("deploy_steps_s"):  # the deploy step's own phases before Serve had the config
            timings["deploy_steps_s"] = dict(deployed["cold_start"]["deploy_steps_s"])
        if deployed["cold_start"].get("note"):
            timings["note"] = deployed["cold_start"]["note"]
    return timings


def build_record(
    *,
    run_id: str,
    target: str,
    params: dict[str, Any],
    parts: dict[str, Any],
    triggered_at: datetime | None = None,
) -> dict[str, Any]:
    """``steps`` says which pipeline steps produced their result (a failed step leaves ``missing``);
    ``cold_start`` how long the trigger took to reach a RUNNING app and a first token."""
    model = parts.get("model") or {}
    config = parts.get("serve_config")
    bench = parts.get("benchmark") or {}
    return redact(
        {
            "run_id": run_id,
            "written_at": datetime.now(UTC).isoformat(),
            "target": target,
            "params": params,
            "artifact": parts.get("artifact"),
            "model": {
                "model_id": model.get("model_id"),
                "revision": model.get("revision"),
                "uri": model.get("uri"),
                "manifest_uri": model.get("manifest_uri"),
                "digest": model.get("digest"),
                "files": model.get("files"),
            },
            "serve_config": config,
            "serve_config_hash": config_hash(config) if config else None,
            "endpoint": (parts.get("deployed") or {}).get("endpoint"),
            "served_name": (parts.get("deployed") or {}).get("served_name"),  # the Param's, or the derived one
            "cold_start": cold_start(triggered_at, parts),
            "smoke": parts.get("smoke"),
            "benchmark": {"overall": bench.get("overall"), "results_uri": bench.get("results_uri"),
                          "judgement": bench.get("judgement"),  # the regression gate's verdict per metric
                          "cost": bench.get("cost"), "sweep": bench.get("sweep")},
            "steps": {name: ("done" if value else "missing") for name, value in parts.items()},
        }
    )
