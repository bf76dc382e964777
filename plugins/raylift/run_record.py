"""The run record: artifact, model + checksums, Serve config (+hash), endpoint, smoke and benchmark in one JSON."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from raylift.serve_config import config_hash

SECRET_HINTS = ("token", "secret", "password", "key", "credential")


def redact(value: Any) -> Any:
    """Drop values whose key looks like a secret; records are meant to be shared."""
    if isinstance(value, dict):
        return {
            k: ("***" if any(h in k.lower() for h in SECRET_HINTS) and isinstance(v, str) else redact(v))
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def build_record(
    *, run_id: str, target: str, params: dict[str, Any], parts: dict[str, Any]
) -> dict[str, Any]:
    """``steps`` says which pipeline steps produced their result (a failed step leaves ``missing``)."""
    model = parts.get("model") or {}
    config = parts.get("serve_config")
    bench = parts.get("benchmark") or {}
    return redact(
        {
            "run_id": run_id,
            "written_at": datetime.now(timezone.utc).isoformat(),
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
            "smoke": parts.get("smoke"),
            "benchmark": {"overall": bench.get("overall"), "results_uri": bench.get("results_uri"),
                          "judgement": bench.get("judgement")},  # the regression gate's verdict per metric
            "steps": {name: ("done" if value else "missing") for name, value in parts.items()},
        }
    )
