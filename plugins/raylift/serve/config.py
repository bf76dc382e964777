"""Build and merge Serve configs (the same dict `serve deploy`, the REST API and KubeRay take).

The REST API's PUT replaces every application it is not given, so a deploy must start from what is
running and change only its own app: ``merge_app`` does exactly that.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass
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


ROUTE_PREFIX_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-/")


def normalised_route_prefix(prefix: str) -> str:
    """``prefix`` as Serve takes it: one leading ``/``, no trailing ``/`` (``/foo/`` -> ``/foo``), no empty
    segment (``//`` -> ``/``, ``/a//b`` -> ``/a/b``). Serve itself refuses a trailing ``/``.

    :raises RayliftValueError: a prefix that does not start with ``/``, or holds other characters than
        letters, digits, ``.``, ``_``, ``-`` and ``/`` (Serve refuses wildcards), or a ``.``/``..`` segment."""
    text = str(prefix)
    bad = sorted(set(text) - ROUTE_PREFIX_CHARS)
    if not text.startswith("/") or bad:
        why = "it must start with '/'" if not text.startswith("/") else f"it holds {''.join(bad)!r}"
        raise RayliftValueError(
            f"route_prefix {prefix!r} is not a path Serve can route: {why}. Give e.g. '/llm' or '/team-a/llm' "
            "(letters, digits, '.', '_', '-' between single '/'; null keeps the config's)")
    segments = [s for s in text.split("/") if s]
    if any(s in (".", "..") for s in segments):
        raise RayliftValueError(f"route_prefix {prefix!r} holds a '.' or '..' segment: give a plain path such as "
                                "'/llm'")
    return "/" + "/".join(segments)


@dataclass(frozen=True)
class AppKind:
    """What raylift needs to know about a Serve app in serve_apps/, keyed by its import path's package.

    ``engine``: what ``engine_args`` configure ("" = the app takes none). ``openai``: it speaks the
    OpenAI API (smoke-tested and benchmarked as an LLM endpoint). ``vllm``: engine args are vLLM's,
    so the target can check them and the parallel sizes are validated against GPUs / NeuronCores.
    ``runtime_module``: what only this app imports, which the local runtime gets on its first deploy.
    """

    name: str
    engine: str = ""
    openai: bool = False
    vllm: bool = False
    runtime_module: str = ""


APP_KINDS: dict[str, AppKind] = {
    kind.name: kind
    for kind in (
        AppKind("llm", engine="vLLM AsyncEngineArgs", openai=True, vllm=True),
        AppKind("llamacpp", engine="llama_cpp.Llama arguments", openai=True, runtime_module="llama_cpp"),
        AppKind("translator"),
    )
}


def app_kind(app: dict[str, Any]) -> AppKind:
    """The kind of an application entry, from its ``import_path`` (``llm.app:build_app`` -> ``llm``)."""
    import_path = str(app.get("import_path") or "")
    package = import_path.split(":")[0].split(".")[0]
    if package not in APP_KINDS:
        raise RayliftValueError(
            f"Serve app {app.get('name')!r} imports {import_path!r}: raylift deploys the apps in serve_apps/ "
            f"({', '.join(f'{k}.app:build_app' for k in APP_KINDS)})."
        )
    return APP_KINDS[package]


AUTOSCALING_KEYS = ("min_replicas", "initial_replicas", "max_replicas", "target_ongoing_requests",
                    "downscale_delay_s", "upscale_delay_s")


def apply_autoscaling(app: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``app`` with Serve autoscaling on every deployment (the ``autoscaling`` Param; {} = unchanged).

    ``max_ongoing_requests`` is a deployment option; the rest go to ``autoscaling_config``, merged
    over the config's own. Serve refuses a fixed ``num_replicas`` beside autoscaling, so a fixed count becomes the
    floor (``min_replicas``) unless ``settings`` name the floor or the start themselves: the replicas asked for
    are never dropped silently (a floor of 0 would let Serve report the app RUNNING with no replica).
    """
    if not settings:
        return app
    unknown = set(settings) - {*AUTOSCALING_KEYS, "max_ongoing_requests"}
    if unknown:
        raise RayliftValueError(
            f"autoscaling has unknown key(s) {sorted(unknown)}; use {', '.join(AUTOSCALING_KEYS)}, max_ongoing_requests."
        )
    out = copy.deepcopy(app)
    for dep in out.get("deployments", []):
        auto = {**(dep.get("autoscaling_config") or {}), **{k: v for k, v in settings.items() if k in AUTOSCALING_KEYS}}
        fixed = dep.pop("num_replicas", None)
        if isinstance(fixed, int) and not {"min_replicas", "initial_replicas"} & set(settings):
            auto["min_replicas"] = max(int(auto.get("min_replicas") or 0), fixed)
        dep["autoscaling_config"] = auto
        _check_replica_bounds(out, dep)
        if "max_ongoing_requests" in settings:
            dep["max_ongoing_requests"] = settings["max_ongoing_requests"]
    return out


def app_url(endpoint: str, app: dict[str, Any]) -> str:
    """Where an app answers: the Serve endpoint plus its ``route_prefix`` (none for ``/``)."""
    prefix = str(app.get("route_prefix") or "/").strip("/")
    return endpoint.rstrip("/") + (f"/{prefix}" if prefix else "")


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
    route_prefix: str | None = None,
) -> dict[str, Any]:
    """One application entry from a base config's first app, with raylift's values filled in."""
    template = copy.deepcopy(base["applications"][0])
    template["name"] = app_name
    if route_prefix:
        template["route_prefix"] = normalised_route_prefix(route_prefix)
    runtime_env = template.setdefault("runtime_env", {})
    runtime_env["working_dir"] = working_dir
    if env_vars:
        runtime_env.setdefault("env_vars", {}).update(env_vars)
    template["args"] = {**template.get("args", {}), **args}
    deployments = template.setdefault("deployments", [{}])
    for dep in deployments:
        if replicas is not None:
            _set_replicas(template, dep, replicas)
        if deployment_overrides:
            dep.update(copy.deepcopy(deployment_overrides))
    return template


def _set_replicas(app: dict[str, Any], dep: dict[str, Any], replicas: int) -> None:
    """``replicas`` on one deployment: its ``num_replicas``, or, where the profile autoscales, its floor.

    Serve takes either a fixed count or ``autoscaling_config``, never both. Under autoscaling the replicas asked
    for are the floor (``min_replicas``, and so where Serve starts): ``llm-gpu.yaml`` scales 0-5, and without
    this its floor of 0 left the app RUNNING with no replica while the smoke test waited on a cold start."""
    auto = dep.get("autoscaling_config")
    if not isinstance(auto, dict):
        dep["num_replicas"] = replicas
        return
    dep["autoscaling_config"] = {**auto, "min_replicas": max(int(auto.get("min_replicas") or 0), replicas)}
    initial = auto.get("initial_replicas")
    if isinstance(initial, int) and initial < replicas:
        dep["autoscaling_config"]["initial_replicas"] = replicas
    _check_replica_bounds(app, dep)


def _check_replica_bounds(app: dict[str, Any], dep: dict[str, Any]) -> None:
    """Refuse, naming both numbers, an autoscaling floor above its ceiling (Serve would refuse it only on apply)."""
    auto = dep.get("autoscaling_config") or {}
    low, high = auto.get("min_replicas"), auto.get("max_replicas")
    if isinstance(low, int) and isinstance(high, int) and low > high:
        raise RayliftValueError(
            f"Serve app {app.get('name')!r}, deployment {dep.get('name')!r}: {low} replica(s) asked for (the "
            f"'replicas' Param, or autoscaling.min_replicas) but its autoscaling allows at most {high} "
            f"(max_replicas). Lower 'replicas' or raise autoscaling.max_replicas. Nothing was deployed."
        )


# what an app at "/" answers that another app's prefix must not take: raylift's LLM apps serve the OpenAI API under
# /v1 (clients, the smoke test and the benchmark call <endpoint>/v1/...)
ROOT_APP_PATHS = ("/v1",)


def _under(path: str, prefix: str) -> bool:
    """Whether Serve would route ``path`` to ``prefix``'s app if both were routes: a match at a '/' boundary."""
    return prefix == "/" or path == prefix or path.startswith(prefix + "/")


def shadowing(prefix: str, other: str) -> str | None:
    """Why two apps' route prefixes cannot share a cluster, or None. Serve's proxy routes a request to the longest
    route prefix it starts with, at a '/' boundary (``LongestPrefixRouter.match_route`` in
    ``ray/serve/_private/proxy_router.py``: routes sorted longest first): so a prefix nested in another's takes that
    subtree of the other app's traffic, silently. Below the root, any nesting is refused; beside an app at ``/``,
    a prefix that would take what it serves (:data:`ROOT_APP_PATHS`: the OpenAI API under ``/v1``)."""
    if prefix == other:
        return "the same prefix"
    inner, outer = (prefix, other) if _under(prefix, other) else (other, prefix) if _under(other, prefix) else ("", "")
    if not inner:
        return None
    if outer != "/":
        return f"{inner!r} lies under {outer!r}: Serve routes by longest prefix, so the app at {inner!r} would " \
               f"take the {inner!r} traffic of the app at {outer!r}"
    taken = [p for p in ROOT_APP_PATHS if _under(p, inner) or _under(inner, p)]
    if taken:
        return f"{inner!r} would take {taken[0]!r} (the OpenAI API the app at '/' serves) from it: Serve routes by " \
               "longest prefix"
    return None


def _check_no_shadowing(app: dict[str, Any], apps: list[dict[str, Any]]) -> None:
    """Refuse ``app`` beside ``apps`` when their route prefixes would take each other's traffic (:func:`shadowing`);
    a missing prefix is Serve's default, ``/``; an explicit null takes no HTTP traffic (Serve exposes no route)."""
    if "route_prefix" in app and app["route_prefix"] is None:
        return
    prefix = str(app.get("route_prefix") or "/")
    for other in apps:
        if "route_prefix" in other and other["route_prefix"] is None:
            continue
        why = shadowing(prefix, str(other.get("route_prefix") or "/"))
        if why:
            raise RayliftValueError(
                f"route_prefix {prefix!r} of app {app['name']!r} clashes with app {other.get('name')!r} at "
                f"{other.get('route_prefix') or '/'!r} ({why}): give the new app a prefix of its own that neither "
                "holds nor lies under another app's (e.g. '/translate' beside an LLM app at '/'), or deploy it "
                "under the same app name. Nothing was deployed."
            )


def merge_app(current: dict[str, Any], app: dict[str, Any], *, defaults: dict[str, Any]) -> dict[str, Any]:
    """``current`` with ``app`` added or replaced (by name); other apps and options kept as they are."""
    merged = copy.deepcopy(current) if current.get("applications") else {}
    for key in ("proxy_location", "http_options"):
        if key not in merged and key in defaults:
            merged[key] = copy.deepcopy(defaults[key])
    apps = [a for a in merged.get("applications", []) if a.get("name") != app["name"]]
    _check_no_shadowing(app, apps)
    merged["applications"] = [*apps, app]
    return merged
