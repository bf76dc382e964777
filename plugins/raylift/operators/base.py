"""Shared plumbing for operators that act on a deployment target chosen by Param."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import ExitStack
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

from raylift.targets.base import Target


def release_holder(context: Any) -> str:
    """Who holds a release's writer lease: the DAG run (every task of it, on any worker, and their retries)."""
    dag_run = context.get("dag_run")
    dag_id = getattr(dag_run, "dag_id", None) or "raylift_deploy"
    return f"{dag_id}/{context['run_id']}"


class TargetOperator(BaseOperator):
    """An operator that works through ``resolve_target(target, target_options, cluster_conn_id)``.

    ``target``, ``target_options`` and ``cluster_conn_id`` are templated, so a DAG passes ``{{ params.target }}``;
    the operator never branches on which cloud it is.

    :param target: the target's name (``local``, ``ray``, ``ecs``, ``eks``; see ``raylift.targets.TARGETS``).
    :param target_options: the target's own options (e.g. ECS cluster and services, an EKS cluster name);
        an option the target does not know is refused with the list it takes.
    :param cluster_conn_id: a ``raylift_cluster`` Airflow connection naming the cluster (its kind, where it is,
        its token, its state store); None: ``target`` and ``target_options`` alone (``local`` by default).
    :param holds_release_lease: this task is part of a release that holds the cluster's writer lease
        (``raylift.operators.lease``): it renews the lease as the run's holder before it starts and while it
        runs, and its Serve-config writes are fenced by it; a lease lost to another writer fails the task first.
    :param release_lease: ``acquire_cluster_lease``'s XCom (an XComArg in the DAG); None: the run never took it, so
        nothing of this release was written and there is no lease to renew.
    :param chosen_profile: ``check_hardware_profile``'s XCom (an XComArg in the DAG), whose image this step follows.
    """

    template_fields: Sequence[str] = ("target", "target_options", "cluster_conn_id", "chosen_profile", "release_lease")

    def __init__(self, *, target: str = "local", target_options: dict[str, Any] | None = None,
                 cluster_conn_id: str | None = None, holds_release_lease: bool = False, release_lease: Any = None,
                 chosen_profile: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.target = target
        self.target_options = target_options or {}
        self.cluster_conn_id = cluster_conn_id
        self.holds_release_lease, self.release_lease = holds_release_lease, release_lease
        self.chosen_profile = chosen_profile
        self._keeping: ExitStack | None = None

    def pre_execute(self, context: Any) -> None:
        super().pre_execute(context)
        self.follow_release_image(context)
        if self.holds_release_lease:
            self.renew_release_lease(context)

    def follow_release_image(self, context: Any) -> None:
        """Given the ``check_hardware_profile`` step's choice (``chosen_profile``, its XCom), this step builds, rolls
        out or renders that image (``Target.release_image``), whatever the cluster's instances say by now."""
        record = self.chosen_profile
        if isinstance(record, dict) and record.get("image"):
            self.target_impl.release_image = str(record["image"])

    def post_execute(self, context: Any, result: Any = None) -> None:
        if self._keeping is not None:
            self._keeping.close()
        super().post_execute(context, result)

    def renew_release_lease(self, context: Any) -> None:
        """Renew this run's writer lease (taken by ``acquire_cluster_lease``) and keep renewing it while this task
        runs; the target's writes are fenced by it. LeaseLostError, before anything is done, if it is not ours."""
        from raylift.config import RELEASE_LEASE_TTL_S
        from raylift.lease import Lease, LeaseLostError
        from raylift.release.writer import cluster_lease

        target = self.target_impl
        manager = cluster_lease(target)
        holder = release_holder(context)
        if self.release_lease is None:  # acquire_cluster_lease's XCom
            self.log.info("this run never took the cluster's writer lease (acquire_cluster_lease did not finish)")
            return  # nothing of this release was written; a write would take a lease of its own
        current = manager.current()
        if current is None or current.holder != holder:
            raise LeaseLostError(
                f"Run {context['run_id']} no longer holds the writer lease of cluster {target.cluster_key()} "
                f"({'held by ' + current.holder if current else 'it expired'}; its TTL is {RELEASE_LEASE_TTL_S:.0f}s, "
                "RAYLIFT_RELEASE_LEASE_TTL_S): another writer may have changed the cluster since this release "
                "began, so this task writes nothing. Run raylift_deploy again."
            )
        # a new token for this task try: an earlier try still running (a zombie) is fenced out (LeaseManager.hand_over)
        lease = manager.hand_over(Lease(current.token, holder, current.expires_at), RELEASE_LEASE_TTL_S)
        target.held_lease = lease
        # renewed while this task runs (LeaseManager.keep's thread, a daemon: it ends with the task's process or
        # a deferral), and kept at the end: the release's next task carries on with it
        self._keeping = ExitStack()
        self._keeping.enter_context(manager.keep(lease, RELEASE_LEASE_TTL_S, release=False))

    def keep_lease_while_deferred(self, wait_s: float) -> None:
        """Before a deferral that may last ``wait_s``: nobody renews the writer lease while the triggerer waits,
        so it is kept for the wait plus the lease's TTL (the gate does the same for a held release's approval)."""
        from raylift.config import RELEASE_LEASE_TTL_S
        from raylift.release.writer import cluster_lease

        held = getattr(self.target_impl, "held_lease", None)
        if not self.holds_release_lease or held is None:
            return
        ttl = float(wait_s) + RELEASE_LEASE_TTL_S
        if ttl > RELEASE_LEASE_TTL_S:
            if self._keeping is not None:  # its next renewal would cut the expiry back to the TTL
                self._keeping.close()
                self._keeping = None
            self.target_impl.held_lease = cluster_lease(self.target_impl).renew(held, ttl)
            self.log.info("the cluster's lease is kept for %.0f s: the deferred wait plus the lease's TTL", ttl)

    @cached_property
    def target_impl(self) -> Target:
        from raylift.targets import resolve_target

        return resolve_target(self.target, self.target_options, self.cluster_conn_id or None)

    def state_for(self, app_name: str) -> Any:
        """The release state of ``app_name`` on this cluster (keyed by the cluster's identity, in its store)."""
        from raylift.release.state import DeploymentState
        from raylift.store import open_store

        target = self.target_impl
        if target.cluster_identity:
            store = target.state_store()
        else:  # as before connections: the Params' aws_conn_id (None: the AWS default chain)
            store = open_store(target.state_uri(), aws_conn_id=self.target_options.get("aws_conn_id"))
        state = DeploymentState(store, target.cluster_key(), app_name)
        if target.held_lease is not None:  # under the release's lease: its records are written fenced by it
            from raylift.release.writer import cluster_lease

            manager = cluster_lease(target)
            if manager.store.uri == store.uri:
                state.fenced(manager, target.held_lease)
        return state


class Stopwatch:
    """Elapsed-time helper for progress lines ("... 12.3s")."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __str__(self) -> str:
        return f"{time.monotonic() - self.t0:.1f}s"
