"""One app's Serve config entry from the deploy's Params, each checked before anything is applied.

Why here and not in the operator: the same rules (replicas an integer >= 0, objects where objects belong,
``engine_args`` only for an app whose kind takes them) hold for whoever renders an app, and a clear refusal names the
Param and what to pass instead.
"""

from __future__ import annotations

import json
from typing import Any

from raylift.errors import RayliftValueError
from raylift.serve.config import app_kind, apply_autoscaling, render_app

# engine_args / app_args travel as one JSON string: in the Serve config, and as one argv string of the engine-args
# check (python -m llm.check_args '<json>'), where Linux caps a single argument at 128 KiB (MAX_ARG_STRLEN): past it
# the check failed mid-run with E2BIG. 64 KiB is far above any real engine config (a chat template included).
ARGS_MAX_BYTES = 64 * 1024


def bounded_args(value: dict[str, Any], name: str) -> dict[str, Any]:
    """``value`` if its JSON is at most :data:`ARGS_MAX_BYTES`, else a RayliftValueError naming the Param."""
    size = len(json.dumps(value).encode())
    if size > ARGS_MAX_BYTES:
        raise RayliftValueError(
            f"'{name}' is {size} bytes as JSON, over the {ARGS_MAX_BYTES // 1024} KiB raylift takes (it is handed to "
            "the engine-args check as one command-line argument): keep large content such as a chat template in a "
            "file in the model's folder and name the file instead. Nothing was deployed."
        )
    return value


def non_negative_int(value: Any, name: str, hint: str = "") -> int:
    """``value`` (a template renders a string) as an integer >= 0, else a RayliftValueError naming the Param."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise RayliftValueError(f"'{name}' must be an integer >= 0, got {value!r}.") from None
    if number < 0:
        raise RayliftValueError(f"'{name}' must be >= 0{hint}, got {number}.")
    return number


def deploy_app(
    base: dict[str, Any],
    profile: str,
    *,
    app_name: str,
    working_dir: str,
    model_uri: str,
    served_name: str,
    replicas: Any,
    engine_args: Any,
    app_args: Any,
    autoscaling: Any,
    route_prefix: str | None,
) -> dict[str, Any]:
    """The app entry of ``base`` (the profile's config file) with the run's model, package and Params applied."""
    count = non_negative_int(replicas, "replicas")
    for field, value in (("engine_args", engine_args), ("app_args", app_args), ("autoscaling", autoscaling)):
        if not isinstance(value, dict):
            raise RayliftValueError(f"'{field}' must be a JSON object, got {type(value).__name__}.")
        bounded_args(value, field)
    kind = app_kind(base["applications"][0])
    if engine_args and not kind.engine:
        raise RayliftValueError(
            f"'engine_args' do not apply to the {kind.name} app ({profile}); pass its settings in 'app_args'."
        )
    base_args = base["applications"][0].get("args", {})
    args = {**app_args, "model": model_uri, "served_model_name": served_name}
    if kind.engine:
        args["engine_args"] = {**base_args.get("engine_args", {}), **engine_args}
    app = render_app(base, app_name=app_name, working_dir=working_dir, args=args, replicas=count,
                     route_prefix=route_prefix or None)
    return apply_autoscaling(app, autoscaling)
