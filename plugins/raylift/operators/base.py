"""Shared plumbing for operators that act on a deployment target chosen by Param."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

from raylift.targets.base import Target


class TargetOperator(BaseOperator):
    """An operator that works through ``resolve_target(target, target_options, cluster_conn_id)``.

    ``target``, ``target_options`` and ``cluster_conn_id`` are templated, so a DAG passes ``{{ params.target }}``;
    the operator never branches on which cloud it is.

    :param target: the target's name (``local``, ``ray``, ``ecs``, ``eks``; see ``raylift.targets.TARGETS``).
    :param target_options: the target's own options (e.g. ECS cluster and services, an EKS cluster name);
        an option the target does not know is refused with the list it takes.
    :param cluster_conn_id: a ``raylift_cluster`` Airflow connection naming the cluster (its kind, where it is,
        its token, its state store); None: ``target`` and ``target_options`` alone (``local`` by default).
    """

    template_fields: Sequence[str] = ("target", "target_options", "cluster_conn_id")

    def __init__(self, *, target: str = "local", target_options: dict[str, Any] | None = None,
                 cluster_conn_id: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.target = target
        self.target_options = target_options or {}
        self.cluster_conn_id = cluster_conn_id

    @cached_property
    def target_impl(self) -> Target:
        from raylift.targets import resolve_target

        return resolve_target(self.target, self.target_options, self.cluster_conn_id or None)

    def state_for(self, app_name: str) -> Any:
        """The release state of ``app_name`` on this cluster (keyed by the cluster's identity, in its store)."""
        from raylift.deploy_state import DeploymentState
        from raylift.store import open_store

        target = self.target_impl
        if target.cluster_identity:
            store = target.state_store()
        else:  # as before connections: the Params' aws_conn_id (None: the AWS default chain)
            store = open_store(target.state_uri(), aws_conn_id=self.target_options.get("aws_conn_id"))
        return DeploymentState(store, target.cluster_key(), app_name)


class Stopwatch:
    """Elapsed-time helper for progress lines ("... 12.3s")."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __str__(self) -> str:
        return f"{time.monotonic() - self.t0:.1f}s"
