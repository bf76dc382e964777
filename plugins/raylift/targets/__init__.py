"""Deployment targets behind one interface; ``get_target(name, **options)`` picks one by name, and
``resolve_target`` builds the one a run names: by its cluster connection, or by the ``target`` Param."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from raylift.errors import RayliftValueError, UnknownTargetError
from raylift.targets.base import BucketWriter, Target

if TYPE_CHECKING:
    from raylift.hooks.raylift_cluster import ClusterConnection

# name -> "module:Class"; imported lazily so the DAG parser never imports boto3/kubernetes.
TARGETS: dict[str, str] = {
    "local": "raylift.targets.local:LocalTarget",
    "ecs": "raylift.targets.ecs:EcsTarget",
    "eks": "raylift.targets.eks:EksTarget",
    "ray": "raylift.targets.ray_cluster:RayClusterTarget",
}


def get_target(name: str, *, cluster_connection: ClusterConnection | None = None, **options: Any) -> Target:
    """Instantiate the target called ``name`` with its target-specific ``options``; ``cluster_connection``: the one
    that names this cluster (its identity and token). Credentials are checked before anything is sent."""
    try:
        path = TARGETS[name]
    except KeyError:
        raise UnknownTargetError(
            f"Unknown target {name!r}: set the 'target' param to one of {sorted(TARGETS)}."
        ) from None
    module, cls = path.split(":")
    target: Target = getattr(importlib.import_module(module), cls)(**options)
    if cluster_connection is not None:
        target.attach_cluster(cluster_connection)
    target.check_credentials()
    return target


# the targets whose ``model_store`` option is a folder or s3:// prefix (ecs/eks name a bucket and prefix instead)
STORE_TARGETS = ("local", "ray")


def _default_store() -> str:
    """The ``local``/``ray`` targets' default model store (RAYLIFT_HOME's), which a run may always name."""
    from raylift.config import local_settings

    return str(local_settings().model_store)


def _current_dag_id() -> str | None:
    try:
        from airflow.sdk import get_current_context

        return str(get_current_context()["dag"].dag_id)
    except Exception:  # noqa: BLE001 - outside a task (tests, the CLI) there is no DAG to scope an allow-list by
        return None


def _check_named_connections(options: dict[str, Any]) -> None:
    """A connection a Params field names must be of the kind that field needs, or its secret would go elsewhere
    (naming a cluster connection as ``hf_conn_id`` would send that cluster's Ray token to the hub)."""
    from raylift.secrets import AWS_CONN_TYPES, HUB_TOKEN_CONN_TYPES, check_conn_type

    needs = {"hf_conn_id": (HUB_TOKEN_CONN_TYPES, "a hub token"), "aws_conn_id": (AWS_CONN_TYPES, "AWS credentials")}
    for key, (kinds, what) in needs.items():
        conn_id = options.get(key)
        if not isinstance(conn_id, str) or not conn_id:
            continue
        try:
            from airflow.sdk.bases.hook import BaseHook

            conn_type = BaseHook.get_connection(conn_id).conn_type
        except Exception:  # noqa: BLE001 - missing: hub_token/AWS's default chain decide, as before
            continue
        check_conn_type(conn_id, conn_type, field=f"target_options.{key}", kinds=kinds, needs=what)


def resolve_target(target: str, target_options: dict[str, Any] | None, cluster_conn_id: str | None, *,
                   dag_id: str | None = None) -> Target:
    """The target a run names. With ``cluster_conn_id`` (a ``raylift_cluster`` connection), the connection says
    which kind of target, where the cluster is and what its token is; the run's ``target_options`` may add
    options, never re-point it (a token goes only to its own connection's hosts). Without one, the ``target``
    Param and ``target_options`` as given (``local``: zero configuration).

    Before anything is sent or written: a relative ``model_store`` is refused, as is one inside (or holding)
    Airflow's DAGs or plugins folder, and a Params-only run's must be the default or under an allowed root
    (``check_model_store``), as must a Params-only ``ecs``/``eks`` run's S3 prefixes (``check_bucket_writes``); a
    connection named by ``hf_conn_id`` / ``aws_conn_id`` must be a hub-token / AWS one; ``cluster_conn_id`` must be
    allowed for ``dag_id`` (default: the running task's DAG) by the ``raylift_allowed_cluster_conns`` Variable, and
    the only connection pointing at its cluster; a Params-only run may not point at a cluster a connection owns."""
    from raylift.hooks.raylift_cluster import (
        REACH_KEYS,
        RayliftClusterHook,
        check_allowed,
        check_bucket_writes,
        check_model_store,
        check_sole_owner,
        check_store_uri,
        check_unowned,
        claim_cluster,
    )

    options = dict(target_options or {})
    check_store_uri(options.get("model_store"), where="target_options.")
    _check_named_connections(options)
    if not cluster_conn_id:
        if target in STORE_TARGETS:
            check_model_store(options.get("model_store"), where="target_options.", from_params=True,
                              default=_default_store())
        check_unowned(target, options)
        built = get_target(target, **options)
        if isinstance(built, BucketWriter):
            check_bucket_writes(built.s3_write_locations(), target=target)
        return built
    check_allowed(cluster_conn_id, dag_id or _current_dag_id())
    cluster = RayliftClusterHook(cluster_conn_id).cluster()
    check_sole_owner(cluster)
    check_model_store(cluster.options.get("model_store"), where=f"Airflow connection {cluster_conn_id!r}: its extra ",
                      from_params=False)
    _check_named_connections(cluster.options)
    if target not in ("local", cluster.kind):
        raise RayliftValueError(
            f"The target Param is {target!r} but connection {cluster_conn_id!r} is a {cluster.kind!r} cluster: "
            f"leave target at its default or set it to {cluster.kind!r}. Nothing was touched."
        )
    clash = sorted(set(options) & REACH_KEYS)
    if clash:
        raise RayliftValueError(
            f"target_options {clash} came from this run's Params, but connection {cluster_conn_id!r} decides where "
            "its cluster is, where its state lives and where its token goes: change the connection (or add "
            "another one), and remove these from target_options. Nothing was sent."
        )
    driven = get_target(cluster.kind, cluster_connection=cluster, **{**cluster.options, **options})
    claim_cluster(cluster, driven.state_store())  # another connection to it, wherever stored: refused
    return driven


__all__ = ["TARGETS", "Target", "get_target", "resolve_target"]
