"""Scheduled and asset-driven redeploys, one cluster each: which clusters, and the conf that re-runs raylift_deploy
on one as it last passed its gates. Also the marker by which a teardown pauses a cluster's redeploys."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from raylift.config import DEFAULT_APP_NAME, DEPLOY_DAG_ID, SCHEDULED_ON_INCONCLUSIVE
from raylift.errors import RayliftValueError, RedeployError
from raylift.operators.base import TargetOperator

if TYPE_CHECKING:
    from raylift.store import ObjectStore

REDACTED = "***"
TEARDOWN_DAG_ID = "raylift_teardown"


def _hidden(value: Any, path: str = "") -> list[str]:
    """Paths of values the run record redacted (they cannot be replayed)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _hidden(v, f"{path}.{k}" if path else str(k))]
    return [path] if value == REDACTED else []


# -- a teardown pauses the cluster's redeploys until its next deploy passes -----------------------------------------
def paused_key(cluster_key: str) -> str:
    """Where the pause marker of the cluster ``cluster_key`` lives in its state store (beside its writer lease)."""
    return f"_raylift/{cluster_key}/redeploys_paused.json"


def pause_redeploys(store: ObjectStore, cluster_key: str, context: Any) -> dict[str, Any]:
    """Write the pause marker: which run paused the cluster's redeploys, who started it, and when."""
    dag_run = context.get("dag_run")
    marker = {
        "cluster": cluster_key,
        "paused_at": datetime.now(UTC).isoformat(),
        "paused_by": {
            "dag_id": getattr(dag_run, "dag_id", None) or TEARDOWN_DAG_ID,
            "run_id": context.get("run_id"),
            "user": getattr(dag_run, "triggering_user_name", None),
        },
        "resume": f"a {DEPLOY_DAG_ID} run on this cluster that passes removes this marker",
    }
    store.write_json(paused_key(cluster_key), marker)
    return marker


def redeploys_paused(store: ObjectStore, cluster_key: str) -> dict[str, Any] | None:
    """The pause marker of the cluster, if a teardown left one."""
    marker = store.read_json(paused_key(cluster_key))
    return marker if isinstance(marker, dict) else None


def resume_redeploys(store: ObjectStore, cluster_key: str) -> bool:
    """Remove the pause marker; True when there was one."""
    key = paused_key(cluster_key)
    if not store.exists(key):
        return False
    store.delete(key)
    return True


# -- the operators ---------------------------------------------------------------------------------------------------
class RedeployClustersOperator(BaseOperator):
    """The clusters a redeploy considers, one ``last_good_conf`` mapped task each (Airflow 3 tasks cannot list
    connections, so they are named): raylift_cluster connection ids, ``None`` for the connection-less target of the
    ``target`` Params (local by default). Duplicates dropped, order kept.

    :param clusters: the list (templated: ``{{ params.clusters }}``); a JSON string of one is read too.
    """

    template_fields = ("clusters",)

    def __init__(self, *, clusters: list[str | None] | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clusters = clusters

    def execute(self, context: Any) -> list[str | None]:
        value: Any = self.clusters
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                pass
        if not isinstance(value, list) or not all(v is None or (isinstance(v, str) and v) for v in value):
            raise RayliftValueError(
                f"'clusters' must be a list of raylift_cluster connection ids (null: the connection-less target), "
                f"got {self.clusters!r}."
            )
        clusters = list(dict.fromkeys(value))
        self.log.info("redeploy considers %s", [c or "the connection-less target" for c in clusters] or "no cluster")
        return clusters


class LastGoodConfOperator(TargetOperator):
    """Returns the Params of the last raylift_deploy run that passed smoke test and gates on this cluster, with its
    ``cluster_conn_id``; skips (naming why) a cluster whose connection has ``redeploy`` false, whose redeploys a
    teardown paused, that never passed a deploy, or that the staged model of this run was not staged for.

    When staged-model Asset events started this run, the model is swapped for the newest one announced in this
    cluster's model store (``model_source`` = its model-store location, ``model_id``, ``revision``); everything
    else stays as it last passed. A redeploy of an unchanged config is cheap: staging skips unchanged files and
    Serve keeps replicas whose config did not change.

    :param app_name: the Serve application whose last good run is repeated.
    """

    template_fields = (*TargetOperator.template_fields, "app_name")

    def __init__(self, *, app_name: str = DEFAULT_APP_NAME, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.app_name = app_name

    @property
    def cluster_name(self) -> str:
        return f"cluster {self.cluster_conn_id!r}" if self.cluster_conn_id else f"target {self.target!r}"

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        from raylift.assets import latest_staged_model, staged_models
        from raylift.dag_params import deploy_params
        from raylift.release.state import run_file

        if self.cluster_conn_id:
            from raylift.hooks.raylift_cluster import RayliftClusterHook

            if not RayliftClusterHook(str(self.cluster_conn_id)).cluster().redeploy:
                raise AirflowSkipException(
                    f"{self.cluster_name}: its connection has redeploy false, so scheduled and asset-triggered "
                    "redeploys do not run on it; set the connection's extra 'redeploy' to true to enable them."
                )
        target = self.target_impl
        paused = redeploys_paused(target.state_store(), target.cluster_key())
        if paused:
            by = paused.get("paused_by") or {}
            raise AirflowSkipException(
                f"{self.cluster_name}: redeploys are paused since {TEARDOWN_DAG_ID} run {by.get('run_id')!r} tore "
                f"it down at {paused.get('paused_at')} (by {by.get('user') or 'an unnamed user'}). Run {DEPLOY_DAG_ID} "
                "on this cluster to resume them: the run that passes removes the pause."
            )
        events = context.get("triggering_asset_events")
        model = latest_staged_model(events, target.model_store_uri())
        if model is None and (announced := staged_models(events)):
            raise AirflowSkipException(
                f"{self.cluster_name}: the model(s) that started this run were staged in "
                f"{sorted({m['uri'] for m in announced})}, not in this cluster's model store "
                f"{target.model_store_uri()}; a staged model is redeployed only on the clusters of its store."
            )
        state = self.state_for(str(self.app_name))
        good = state.last_good()
        if not good:
            raise AirflowSkipException(
                f"{self.cluster_name}: nothing to redeploy, no raylift_deploy run of app {self.app_name!r} on it has "
                f"passed its smoke test and gates yet (state in {state.store.uri}). Run raylift_deploy once first."
            )
        record = state.store.read_json(run_file(good['run_id'], "record")) or {}
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
        conf["cluster_conn_id"] = self.cluster_conn_id or None  # the replay lands on the cluster whose state it read
        # nobody is there to approve a scheduled release: it never holds (raylift.config.SCHEDULED_ON_INCONCLUSIVE)
        conf["on_inconclusive"] = SCHEDULED_ON_INCONCLUSIVE
        if model:
            conf.update(model_source=model["uri"], model_id=model["model_id"], revision=model["revision"])
        self.log.info(
            "%s: redeploying the last good run %s%s: %s",
            self.cluster_name,
            good["run_id"],
            f" with the newly staged model {model['model_id']}@{model['revision']}" if model else "",
            {k: conf[k] for k in ("cluster_conn_id", "target", "model_id", "served_name", "replicas", "workers")
             if k in conf},
        )
        return conf
