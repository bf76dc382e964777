"""Build and merge Serve configs (the same dict `serve deploy`, the REST API and KubeRay take).

The REST API's PUT replaces every application it is not given, so a deploy must start from what is
running and change only its own app: ``merge_app`` does exactly that.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from raylift.errors import RayliftValueError


def load_config(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise RayliftValueError(f"Serve config {path} does not exist: pick one from serve_apps/configs/.") from None
    if not isinstance(data, dict) or not data.get("applications"):
        raise RayliftValueError(f"Serve config {path} has no 'applications' list.")
    return data


def config_hash(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def app_by_name(config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((a for a in config.get("applications", []) if a.get("name") == name), None)


def render_app(
    base: dict[str, Any],
    *,
    app_name: str,
    working_dir: str,
    args: dict[str, Any],
    replicas: int | None = None,
    env_vars: dict[str, str] | None = None,
    deployment_overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One application entry from a base config's first app, with raylift's values filled in."""
    template = copy.deepcopy(base["applications"][0])
    template["name"] = app_name
    runtime_env = template.setdefault("runtime_env", {})
    runtime_env["working_dir"] = working_dir
    if env_vars:
        runtime_env.setdefault("env_vars", {}).update(env_vars)
    template["args"] = {**template.get("args", {}), **args}
    deployments = template.setdefault("deployments", [{}])
    for dep in deployments:
        if replicas is not None and "autoscaling_config" not in dep:
            dep["num_replicas"] = replicas
        if deployment_overrides:
            dep.update(copy.deepcopy(deployment_overrides))
    return template


def merge_app(current: dict[str, Any], app: dict[str, Any], *, defaults: dict[str, Any]) -> dict[str, Any]:
    """``current`` with ``app`` added or replaced (by name); other apps and options kept as they are."""
    merged = copy.deepcopy(current) if current.get("applications") else {}
    for key in ("proxy_location", "http_options"):
        if key not in merged and key in defaults:
            merged[key] = copy.deepcopy(defaults[key])
    apps = [a for a in merged.get("applications", []) if a.get("name") != app["name"]]
    prefix = app.get("route_prefix")
    clash = [a["name"] for a in apps if prefix is not None and a.get("route_prefix") == prefix]
    if clash:
        raise RayliftValueError(
            f"route_prefix {prefix!r} of app {app['name']!r} is already used by {clash}: "
            "give the new app its own route_prefix or deploy it under the same app name."
        )
    merged["applications"] = [*apps, app]
    return merged
