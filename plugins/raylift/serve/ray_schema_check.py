"""Ray's own judgement of a Serve config, run by the Python of the Ray that will run it (a stand-alone script).

Why a script: the Airflow side talks to clusters over their REST APIs and has no Ray of its own (managed Airflow pins
another Ray than a user's cluster runs, and each Ray version has its own rules), so Ray's models judge the config
where that Ray is: the ``local`` target runs this file with the runtime env's Python, the ``ray`` and ``ecs``
targets send its text to the cluster's head as a Ray job (``python -c``). Nothing of raylift's is importable there:
the standard library and Ray (with the pydantic Ray depends on) only. Ray's modules are imported by name
(``importlib.import_module("ray...")``) because no one Ray version is the one to type-check against: the cluster's
is.

What it checks, as Serve does: the app by ``ServeApplicationSchema`` (what ``PUT /api/serve/applications/`` parses),
then what Serve checks only when it applies the config (refused here rather than DEPLOY_FAILED there): each
``autoscaling_config`` by ``AutoscalingConfig`` (``num_replicas: auto`` starts from ``AutoscalingConfig.default()``,
as Serve does) and ``ray_actor_options`` / placement group options by Serve's ``ReplicaConfig``; then the whole
config (the app beside the other apps Ray accepts) by ``ServeDeploySchema`` (unique names and route prefixes, no
per-app host/port). A refusal names the field path from Ray's error and Ray's reason. Fields Ray does not define
are ignored by Serve (forward compatibility): they come back as warnings (a typo?).

Usage: ``python ray_schema_check.py '<config json>' [app name]`` (the JSON ``-`` or left out: read from stdin). Without an app
name every app of the config is checked as the one to deploy. Prints one JSON line, the verdict: ``ok``, ``ray`` (the
version that judged), ``warnings``, and for a refusal ``app``, ``stage`` (``app``: the app itself; ``deploy``: the
whole config) and ``problems``. Exits 0 with a verdict, non-zero when it could not judge (no Ray, bad input).
"""

from __future__ import annotations

import importlib
import json
import sys
import types
import typing
from typing import Any


def _field_path(model: Any, loc: tuple[int | str, ...], data: Any) -> str:
    """Ray's pydantic error location as a config path, e.g. ``deployments[LLMServer].num_replicas``.

    Walks ``model``'s field types beside the raw ``data``: a list index is shown as the item's name
    where it has one; what pydantic appends after a union field (its member types, e.g.
    ``constrained-int``, ``str``) is not a field, so the path stops there.
    """
    from pydantic import BaseModel

    parts: list[str] = []
    kind: Any = model
    for key in loc:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1:
            kind = args[0]  # Optional[X]: pydantic adds no location step for it
        origin = typing.get_origin(kind)
        is_model = isinstance(kind, type) and issubclass(kind, BaseModel)
        if is_model and isinstance(key, str) and key in kind.model_fields:
            parts.append(key)
            kind = kind.model_fields[key].annotation
        elif origin is list and isinstance(key, int) and parts:
            item = data[key] if isinstance(data, list) and 0 <= key < len(data) else None
            name = item.get("name") if isinstance(item, dict) else None
            parts[-1] += f"[{name if name else key}]"
            kind, data = (typing.get_args(kind) or (Any,))[0], item
            continue
        elif (kind is dict or origin is dict) and isinstance(key, str):
            parts.append(key)
            kind = (typing.get_args(kind) or (Any, Any))[1]
        else:
            break
        data = data.get(key) if isinstance(data, dict) else None
    return ".".join(parts)


def _ray_problems(err: Any, model: Any, data: Any, prefix: str = "") -> list[str]:
    """One line per field Ray's pydantic ``model`` refused: ``path: Ray's reason (got value) (Ray's model)``."""
    by_path: dict[str, list[str]] = {}
    got: dict[str, str] = {}
    for e in err.errors(include_url=False):
        path = _field_path(model, tuple(e["loc"]), data)
        reason = str(e["msg"]).removeprefix("Value error, ").rstrip(".!")
        if reason not in by_path.setdefault(path, []):
            by_path[path].append(reason)
        if not isinstance(e.get("input"), (dict, list)) and e["type"] != "value_error":
            got[path] = f" (got {e.get('input')!r})"
    return [
        f"{'.'.join(p for p in (prefix, path) if p) or '(the whole config)'}: {' or '.join(reasons)}{got.get(path, '')} "
        f"(Ray's {model.__name__})"
        for path, reasons in by_path.items()
    ]


def _set(dep: Any, name: str) -> bool:
    """Whether the config sets deployment option ``name`` (unset options keep the code's values)."""
    default = importlib.import_module("ray.serve._private.utils").DEFAULT
    return name in dep.model_fields_set and getattr(dep, name) is not default.VALUE


def _autoscaling(dep: Any, where: str, problems: list[str]) -> None:
    """The deployment's ``AutoscalingConfig`` built as Serve builds it when applying the config; refusals to
    ``problems``."""
    from pydantic import ValidationError

    autoscaling_config = importlib.import_module("ray.serve.config").AutoscalingConfig
    given = dep.autoscaling_config if _set(dep, "autoscaling_config") else None
    if isinstance(given, autoscaling_config):
        return
    if dep.num_replicas == "auto":  # Serve: AutoscalingConfig.default() updated with what the config gives
        values = {**autoscaling_config.default().model_dump(), **(given or {})}
    elif given is None:
        return
    else:
        values = dict(given)
    try:
        autoscaling_config(**values)
    except ValidationError as err:
        problems += _ray_problems(err, autoscaling_config, values, prefix=f"{where}.autoscaling_config")


def _replica_options(dep: Any, where: str, problems: list[str]) -> None:
    """``ray_actor_options`` and the placement group options by Serve's own ``ReplicaConfig`` (what the controller
    runs when it applies the config; private to Serve, so it is the cluster's Ray that runs it). Checked in two
    steps so that the refusal names the field."""
    replica_config = importlib.import_module("ray.serve._private.config").ReplicaConfig
    options = dep.ray_actor_options.model_dump(exclude_unset=True) if _set(dep, "ray_actor_options") else {}
    group = {
        name: getattr(dep, name)
        for name in (
            "placement_group_bundles", "placement_group_strategy", "placement_group_bundle_label_selector",
            "max_replicas_per_node",
        )
        if _set(dep, name)
    }
    steps: list[tuple[str, dict[str, Any]]] = [("ray_actor_options", {})]
    if group:
        steps.append(("/".join(group), group))
    for fields, kwargs in steps:
        try:
            replica_config.create(dep.name, ray_actor_options=dict(options), **kwargs)  # it fills in num_cpus
        except (ValueError, TypeError) as err:
            problems.append(f"{where}.{fields}: {str(err).rstrip('.')} (Ray Serve's ReplicaConfig)")
            break


def _unknown_fields(raw: dict[str, Any], where: str) -> list[str]:
    """Deployment fields (and ``ray_actor_options`` keys) Ray's schema does not define: Serve ignores them."""
    schema = importlib.import_module("ray.serve.schema")
    out = [f"{where}.{k}" for k in raw if k not in schema.DeploymentSchema.model_fields]
    options = raw.get("ray_actor_options")
    if isinstance(options, dict):
        out += [f"{where}.ray_actor_options.{k}" for k in options if k not in schema.RayActorOptionsSchema.model_fields]
    return out


def app_problems(app: dict[str, Any], warnings: list[str]) -> list[str]:
    """What Serve would refuse in ``app`` (one entry of ``applications``); the fields it ignores to ``warnings``."""
    from pydantic import ValidationError

    schema = importlib.import_module("ray.serve.schema").ServeApplicationSchema
    try:
        parsed = schema.model_validate(app)
    except ValidationError as err:
        return _ray_problems(err, schema, app)
    problems: list[str] = []
    for dep in parsed.deployments:
        where = f"deployments[{dep.name}]"
        _replica_options(dep, where, problems)
        _autoscaling(dep, where, problems)
    raws = [d for d in app.get("deployments") or [] if isinstance(d, dict)]
    for raw, dep in zip(raws, parsed.deployments):
        for path in _unknown_fields(raw, f"deployments[{dep.name}]"):
            warnings.append(f"{path} is not a field of Ray's Serve schema: Serve ignores it (a typo?)")
    return problems


def check(config: dict[str, Any], app_name: str | None = None) -> dict[str, Any]:
    """The verdict on ``config``: the app ``app_name`` (every app when None) by itself, then the whole config, its
    other apps only where Ray accepts them (another app's config is Serve's business, not this deploy's)."""
    from pydantic import ValidationError

    deploy_schema = importlib.import_module("ray.serve.schema").ServeDeploySchema
    apps = [a for a in config.get("applications") or [] if isinstance(a, dict)]
    ours = [a for a in apps if app_name is None or a.get("name") == app_name]
    verdict: dict[str, Any] = {"ok": True, "ray": str(importlib.import_module("ray").__version__), "warnings": []}
    for app in ours:
        problems = app_problems(app, verdict["warnings"])
        if problems:
            return {**verdict, "ok": False, "app": app.get("name"), "stage": "app", "problems": problems}
    running = [] if app_name is None else [a for a in apps if a.get("name") != app_name and not app_problems(a, [])]
    whole = {**config, "applications": [*ours, *running]}
    try:
        deploy_schema.model_validate(whole)
    except ValidationError as err:
        return {**verdict, "ok": False, "app": app_name, "stage": "deploy",
                "problems": _ray_problems(err, deploy_schema, whole)}
    return verdict


def main(argv: list[str]) -> int:
    """``argv``: [the config as JSON (``-``: stdin), the app's name]; prints the verdict as one JSON line."""
    config = json.loads(argv[0] if argv and argv[0] != "-" else sys.stdin.read())
    if not isinstance(config, dict):
        print("the Serve config must be a JSON object", file=sys.stderr)
        return 2
    print(json.dumps(check(config, argv[1] if len(argv) > 1 else None)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
