"""Put one Serve app back the way it was, leaving every other app alone."""

from __future__ import annotations

import logging
import time
from typing import Any

from raylift.deploy_state import DeploymentState
from raylift.hooks.ray_dashboard import RayDashboardHook
from raylift.serve_config import app_by_name, merge_app
from raylift.targets.base import Target

log = logging.getLogger(__name__)


def restore_app(target: Target, state: DeploymentState, run_id: str, app_name: str) -> str:
    """Re-apply ``app_name`` from the last good config (or the pre-deploy one); returns what was done."""
    saved, source = state.rollback_config(run_id)
    current = target.current_serve_config()
    app = app_by_name(saved, app_name) if saved else None
    if app is not None:
        restored = merge_app(current, app, defaults=saved or {})
        action = f"restored app {app_name!r} from the {source}"
    else:
        restored = dict(current)
        restored["applications"] = [a for a in current.get("applications", []) if a.get("name") != app_name]
        action = f"removed app {app_name!r} (it had no earlier good version: {source})"
    target.apply_serve_config(restored)
    log.warning("rollback: %s", action)
    return action


def wait_running(dashboard: RayDashboardHook, app_name: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """Block until ``app_name`` is RUNNING again (used after a rollback, which reuses cached replicas)."""
    deadline = time.monotonic() + timeout_s
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        status = dashboard.app_statuses(dashboard.serve_applications()).get(app_name, {})
        if status.get("status") == "RUNNING":
            return status
        time.sleep(2)
    return status
