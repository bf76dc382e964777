"""The run record: artifact, model + checksums, Serve config (+hash), endpoint, smoke and benchmark in one JSON."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from raylift.serve.config import config_hash

SECRET_HINTS = ("token", "secret", "password", "key", "credential")
REDACTED = "***"
# keys no secret lives under although Airflow's sensitive names match them: Serve's own config field
NOT_SECRET_KEYS = frozenset({"proxy_location"})
# secrets Airflow's masker cannot know (it masks values registered with it, and keys by name): a URL's userinfo
# (``https://user:pw@host``, ``https://<token>@host``), an HTTP credential (``Bearer <token>``, ``Basic <b64>``),
# and a Hugging Face token's shape (``hf_`` + 30 or more letters and digits)
SECRET_VALUE = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#\s@]+@"
    r"|\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"
    r"|\bhf_[A-Za-z0-9]{30,}",
    re.IGNORECASE,
)


def _airflow_redact() -> Callable[..., Any] | None:
    """Airflow's secrets masker's ``redact``: the instance a task's connections and variables registered their
    values with (``airflow.sdk._shared.secrets_masker`` on Airflow 3.2+, ``airflow.sdk.execution_time
    .secrets_masker`` on 3.1); None where neither imports."""
    import importlib

    for module in ("airflow.sdk._shared.secrets_masker", "airflow.sdk.execution_time.secrets_masker"):
        try:
            return cast("Callable[..., Any]", importlib.import_module(module).redact)
        except (ImportError, AttributeError):
            continue
    return None


def _looks_secret(key: str, airflow_redact: Callable[..., Any] | None = None) -> bool:
    """A key naming a secret (``hf_token``, ``aws_secret_access_key``, and what Airflow's masker calls sensitive:
    ``authorization``, ``dsn``, ``webhook_url``...); ``*_at`` keys are timestamps (``first_token_at`` is when the
    first token came, not a token)."""
    key = key.lower()
    if key.endswith("_at") or key in NOT_SECRET_KEYS:
        return False
    if any(h in key for h in SECRET_HINTS):
        return True
    return airflow_redact is not None and airflow_redact("x", key) != "x"


def _secret_value(value: str, airflow_redact: Callable[..., Any] | None) -> bool:
    """A value holding a secret whatever its key: one Airflow's masker masks, or one of :data:`SECRET_VALUE`."""
    if SECRET_VALUE.search(value):
        return True
    return airflow_redact is not None and airflow_redact(value) != value


def redact(value: Any) -> Any:
    """Records are meant to be shared: a string under a key that looks like a secret, or that holds one (by value:
    anything Airflow's masker masks, a URL's userinfo, an ``Authorization`` credential), becomes ``***`` whole, so
    a redeploy sees it hidden (and refuses to replay it) rather than a half-masked value."""
    return _redact(value, _airflow_redact())


def _redact(value: Any, masker: Callable[..., Any] | None) -> Any:
    if isinstance(value, dict):
        return {k: (REDACTED if isinstance(v, str) and (_looks_secret(str(k), masker) or _secret_value(v, masker))
                    else _redact(v, masker)) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, masker) for v in value]
    if isinstance(value, str) and _secret_value(value, masker):
        return REDACTED
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
