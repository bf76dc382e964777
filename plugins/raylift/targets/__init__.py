"""Deployment targets behind one interface; ``get_target(name, **options)`` picks one by name, and
``resolve_target`` builds the one a run names: by its cluster connection, or by the ``target`` Param."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from raylift.errors import RayliftValueError, UnknownTargetError
from raylift.targets.base import Target

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


def resolve_target(target: str, target_options: dict[str, Any] | None, cluster_conn_id: str | None) -> Target:
    """The target a run names. With ``cluster_conn_id`` (a ``raylift_cluster`` connection), the connection says
    which kind of target, where the cluster is and what its token is; the run's ``target_options`` may add
    options, never re-point it (a token goes only to its own connection's hosts). Without one, the ``target``
    Param and ``target_options`` as given (``local``: zero configuration)."""
    options = dict(target_options or {})
    if not cluster_conn_id:
        return get_target(target, **options)
    from raylift.hooks.raylift_cluster import REACH_KEYS, RayliftClusterHook

    cluster = RayliftClusterHook(cluster_conn_id).cluster()
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
    return get_target(cluster.kind, cluster_connection=cluster, **{**cluster.options, **options})


__all__ = ["TARGETS", "Target", "get_target", "resolve_target"]
