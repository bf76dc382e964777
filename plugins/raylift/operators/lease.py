"""A release holds its cluster's writer lease from before the scale step until promote or rollback is done.

Why: a release is several tasks (scale, deploy, smoke test, benchmark, record or rollback), which Celery may run on
different hosts. If another run could write the cluster's Serve config between this run's deploy and its gate, this
run's rollback would judge and undo the wrong thing. So ``acquire_cluster_lease`` waits (rescheduled, no worker slot
held) until the lease in the cluster's store (``raylift.lease``) is free and takes it for this run; every task of the
span renews it as this run's holder (``TargetOperator.holds_release_lease``) and its writes are fenced by it; and
``release_cluster_lease`` gives it back whatever happened. A worker that dies leaves the lease to expire
(``RELEASE_LEASE_TTL_S``); its task's retry, being the same run, carries on with it. Each task try takes the lease
under a new fencing token (``LeaseManager.hand_over``): a try Airflow gave up on that still runs (a zombie) holds
a stale token, so its renewals stop and its writes are refused once the retry has started.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk.bases.sensor import BaseSensorOperator

from raylift.operators.base import TargetOperator, release_holder
from raylift.targets.base import Target


class AcquireClusterLeaseSensor(BaseSensorOperator):
    """Wait until the cluster's writer lease is free, then take it for this run (re-entrant: a retry keeps it).

    :param target: the target's name, as for every raylift operator.
    :param target_options: the target's own options.
    :param cluster_conn_id: the cluster's ``raylift_cluster`` connection.
    """

    template_fields: Sequence[str] = ("target", "target_options", "cluster_conn_id")

    def __init__(self, *, target: str = "local", target_options: dict[str, Any] | None = None,
                 cluster_conn_id: str | None = None, **kwargs: Any) -> None:
        from raylift.config import RELEASE_LEASE_WAIT_S

        kwargs.setdefault("mode", "reschedule")
        kwargs.setdefault("poke_interval", 5)
        kwargs.setdefault("timeout", RELEASE_LEASE_WAIT_S)
        super().__init__(**kwargs)
        self.target, self.target_options, self.cluster_conn_id = target, target_options or {}, cluster_conn_id

    @cached_property
    def target_impl(self) -> Target:
        from raylift.targets import resolve_target

        return resolve_target(self.target, self.target_options, self.cluster_conn_id or None)

    def poke(self, context: Any) -> Any:
        from airflow.sdk.bases.sensor import PokeReturnValue

        from raylift.config import RELEASE_LEASE_TTL_S
        from raylift.lease import LeaseBusyError
        from raylift.release.writer import cluster_lease

        manager = cluster_lease(self.target_impl)
        try:
            lease = manager.try_acquire(release_holder(context), RELEASE_LEASE_TTL_S)
        except LeaseBusyError as exc:
            self.log.info("waiting for the cluster's writer lease: %s", exc)
            return False
        self.log.info("holding the writer lease of cluster %s (token %d) until this release ends",
                      self.target_impl.cluster_key(), lease.token)
        return PokeReturnValue(is_done=True, xcom_value={"token": lease.token, "holder": lease.holder})


class ReleaseClusterLeaseOperator(TargetOperator):
    """Give this run's writer lease back (runs whatever happened before it; a lease already lost is left)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)

    def execute(self, context: Any) -> None:
        from raylift.lease import Lease
        from raylift.release.writer import cluster_lease

        manager = cluster_lease(self.target_impl)
        current = manager.current()
        holder = release_holder(context)
        if current is None or current.holder != holder:
            self.log.info("this run holds no writer lease now (%s); nothing to release",
                          f"held by {current.holder}" if current else "free")
            return
        manager.release(Lease(token=current.token, holder=holder, expires_at=current.expires_at))
        self.log.info("released the writer lease of cluster %s (token %d)", self.target_impl.cluster_key(),
                      current.token)
