"""One writer per cluster: every raylift write of a cluster's Serve config goes through here.

A Serve config change is a read-merge-write of the whole cluster's config (the REST API's PUT replaces
every app it is not given), so two writers in between one another silently revert each other. Every
raylift path that writes (deploy, rollout settle, rollback, undeploy; teardown too) holds the cluster's
writer lease (``raylift.lease``, kept in the cluster's state store under ``_raylift/<cluster key>/lease``,
so it holds across Airflow workers on different hosts) around a final read, a compare with the config the
step read and merged into (sha256 of the whole config), a fencing check (the lease is still this step's)
and the PUT. A change by anyone else since (another app's deploy, a hand ``serve deploy``) refuses the
write, naming what changed; nothing is reverted silently.

Ray's Serve REST API has no conditional PUT, so the fence is also checked where it can be made conditional: right
before each PUT the writer records it in the state store (``_raylift/<cluster key>/serve_write.json``: token,
holder, config hash) by a fenced write (``LeaseManager.fenced_write``: the record's version is read at the fencing
check and the write lands only if it is unchanged). A writer paused after its fencing check, whose lease a new
holder took and wrote under meanwhile, is refused by the store and sends nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from raylift.errors import DeployError
from raylift.lease import FencedWrite, Lease, LeaseBusyError, LeaseLostError, LeaseManager, new_holder_id
from raylift.serve.config import config_hash
from raylift.targets.base import Target

log = logging.getLogger(__name__)

LOCK_WAIT_S = 300.0  # the lease is held for a read and a PUT (seconds); a longer wait means a stuck writer
LEASE_TTL_S = 60.0  # a holder that dies blocks the cluster's writers this long at most (renewed every third)
FENCE_MARGIN_S = 10.0  # the fencing check wants the lease valid this much longer: the PUT fits in it


class ServeConfigConflictError(DeployError):
    """The cluster's Serve config changed between this step's read and its write (the message says how)."""


def describe_change(before: dict[str, Any], now: dict[str, Any]) -> str:
    """What differs between two whole-cluster Serve configs, by app name (and cluster options)."""
    old = {a.get("name"): a for a in before.get("applications", [])}
    new = {a.get("name"): a for a in now.get("applications", [])}
    parts = [f"app {n!r} added" for n in sorted(set(new) - set(old), key=str)]
    parts += [f"app {n!r} removed" for n in sorted(set(old) - set(new), key=str)]
    parts += [f"app {n!r} changed" for n in sorted(set(old) & set(new), key=str) if old[n] != new[n]]
    parts += [f"{k} changed" for k in ("proxy_location", "http_options") if before.get(k) != now.get(k)]
    return ", ".join(parts) or "the config differs"


def cluster_lease(target: Target) -> LeaseManager:
    """The cluster's writer lease, in its state store (one key per cluster, whatever host asks)."""
    return LeaseManager(target.state_store(), f"_raylift/{target.cluster_key()}/lease")


@contextmanager
def cluster_lock(target: Target, wait_s: float = LOCK_WAIT_S, *, lease: Lease | None = None) -> Iterator[Lease]:
    """Hold the cluster's writer lease (one raylift writer at a time, across hosts), waiting up to ``wait_s``;
    yields the Lease. With ``lease`` (the caller already holds it, e.g. over a whole release), checks that it
    is still current and yields it: nothing is acquired, renewed or released here."""
    with _held(target, wait_s, lease) as (_, held):
        yield held


@contextmanager
def _held(target: Target, wait_s: float, lease: Lease | None) -> Iterator[tuple[LeaseManager, Lease]]:
    manager = cluster_lease(target)
    lease = lease or target.held_lease  # a release's lease, held over its tasks (raylift.operators.lease)
    if lease is not None:
        _fence(manager, lease)
        yield manager, lease
        return
    try:
        held = manager.acquire(new_holder_id(), LEASE_TTL_S, wait_s)
    except LeaseBusyError as exc:
        raise ServeConfigConflictError(
            f"Another raylift step has held the Serve config lock of this cluster for over {wait_s:.0f}s ({exc}); "
            "nothing was applied. Wait for it to finish, then run this again."
        ) from None
    with manager.keep(held, LEASE_TTL_S):
        yield manager, held


def _fence(manager: LeaseManager, lease: Lease) -> None:
    try:
        manager.fence(lease, margin_s=FENCE_MARGIN_S)
    except LeaseLostError as exc:
        raise _lost(exc) from None


def _lost(exc: LeaseLostError) -> ServeConfigConflictError:
    return ServeConfigConflictError(
        f"This step no longer holds the cluster's writer lease ({exc}); another writer may have taken "
        "over, so nothing was applied. Run this step again."
    )


def write_record_key(target: Target) -> str:
    """The state-store record every fenced Serve-config write of this cluster updates before its PUT."""
    return f"_raylift/{target.cluster_key()}/serve_write.json"


def _prepare(target: Target, manager: LeaseManager, lease: Lease) -> FencedWrite:
    try:
        return manager.prepare_write(lease, write_record_key(target), margin_s=FENCE_MARGIN_S)
    except LeaseLostError as exc:
        raise _lost(exc) from None


def _put(target: Target, ticket: FencedWrite, config: dict[str, Any]) -> None:
    """Commit the fenced write record (conditional at the store), then PUT: a stale holder sends nothing."""
    from datetime import UTC, datetime

    record = {"token": ticket.lease.token, "holder": ticket.lease.holder, "config_hash": config_hash(config),
              "at": datetime.now(UTC).isoformat()}
    try:
        ticket.commit(json.dumps(record, sort_keys=True).encode())
    except LeaseLostError as exc:
        raise _lost(exc) from None
    target.apply_serve_config(config)


def write_serve_config(
    target: Target, config: dict[str, Any], *, read: dict[str, Any], lease: Lease | None = None
) -> None:
    """PUT ``config``, which the caller built from ``read``, unless the cluster's config changed since (or
    the writer lease was lost). ``lease``: one the caller already holds (see ``cluster_lock``)."""
    with _held(target, LOCK_WAIT_S, lease) as (manager, held):
        ticket = _prepare(target, manager, held)
        now = target.current_serve_config()
        if config_hash(now) != config_hash(read):
            raise ServeConfigConflictError(
                f"The cluster's Serve config changed since this step read it ({describe_change(read, now)}); "
                "nothing was applied, so that change is kept. Run this step again to build on it."
            )
        _put(target, ticket, config)


def update_serve_config(
    target: Target, change: Callable[[dict[str, Any]], dict[str, Any]], *, lease: Lease | None = None
) -> dict[str, Any]:
    """Under the cluster's lease: read the config, apply ``change(current)``; returns what was applied."""
    with _held(target, LOCK_WAIT_S, lease) as (manager, held):
        ticket = _prepare(target, manager, held)
        config = change(target.current_serve_config())
        _put(target, ticket, config)
        return config
