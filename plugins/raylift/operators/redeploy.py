"""The conf that re-runs raylift_deploy as it last passed its gates (scheduled / asset-driven redeploy)."""

from __future__ import annotations

from typing import Any

from raylift.config import DEFAULT_APP_NAME
from raylift.errors import RedeployError
from raylift.operators.base import TargetOperator

REDACTED = "***"


def _hidden(value: Any, path: str = "") -> list[str]:
    """Paths of values the run record redacted (they cannot be replayed)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _hidden(v, f"{path}.{k}" if path else str(k))]
    return [path] if value == REDACTED else []


class LastGoodConfOperator(TargetOperator):
    """Returns the Params of the last raylift_deploy run that passed smoke test and gates on this target.

    When a staged-model Asset event started this run, the model is swapped for the announced one
    (``model_source`` = its model-store location, ``model_id``, ``revision``); everything else stays as
    it last passed. A redeploy of an unchanged config is cheap: staging skips unchanged files and Serve
    keeps replicas whose config did not change.

    :param app_name: the Serve application whose last good run is repeated.
    """

    template_fields = (*TargetOperator.template_fields, "app_name")

    def __init__(self, *, app_name: str = DEFAULT_APP_NAME, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_name = app_name

    def execute(self, context: Any) -> dict[str, Any]:
        from raylift.assets import latest_staged_model
        from raylift.dag_params import deploy_params
        from raylift.deploy_state import run_key

        state = self.state_for(str(self.app_name))
        good = state.last_good()
        if not good:
            raise RedeployError(
                f"Nothing to redeploy: no raylift_deploy run of app {self.app_name!r} on target "
                f"{self.target!r} has passed its smoke test and gates yet (state in {state.store.uri}). "
                "Run raylift_deploy once first."
            )
        record = state.store.read_json(f"{run_key(good['run_id'])}/record.json") or {}
        params = record.get("params")
        if not params:
            raise RedeployError(
                f"The last good run {good['run_id']!r} has no run record with its Params under "
                f"{state.store.uri}; run raylift_deploy with the conf you want instead."
            )
        conf = {key: value for key, value in params.items() if key in deploy_params()}
        # A re-baseline is a one-off choice of the run that made it; a replay is judged against that run.
        conf.pop("regression_baseline", None)
        if hidden := _hidden(conf):
            raise RedeployError(
                f"The last good run's record hides {', '.join(hidden)} (redacted as secrets), so it cannot "
                "be replayed; keep secrets in Airflow connections, or run raylift_deploy with a full conf."
            )
        model = latest_staged_model(context.get("triggering_asset_events"))
        if model:
            conf.update(model_source=model["uri"], model_id=model["model_id"], revision=model["revision"])
        self.log.info(
            "redeploying the last good run %s%s: %s",
            good["run_id"],
            f" with the newly staged model {model['model_id']}@{model['revision']}" if model else "",
            {k: conf[k] for k in ("target", "model_id", "served_name", "replicas", "workers") if k in conf},
        )
        return conf
