"""One writer per cluster: every raylift write of a cluster's Serve config goes through here.

A Serve config change is a read-merge-write of the whole cluster's config (the REST API's PUT replaces
every app it is not given), so two writers in between one another silently revert each other. Every
raylift path that writes (deploy, rollout settle, rollback, undeploy) takes the cluster's lock (a file
lock under ``RAYLIFT_HOME/locks``, keyed by the target's Serve endpoint) around a final read, a
compare with the config the step read and merged into (sha256 of the whole config), and the PUT. A
change by anyone else since (another app's deploy, a hand ``serve deploy``) refuses the write, naming
what changed; nothing is reverted silently.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from raylift.errors import DeployError
from raylift.serve_config import config_hash
from raylift.targets.base import Target

log = logging.getLogger(__name__)

LOCK_WAIT_S = 300.0  # the lock is held for a read and a PUT (seconds); a longer wait means a stuck writer


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


def lock_path_for(target: Target) -> Any:
    from raylift.config import local_settings

    try:
        endpoint = target.endpoint_url()
    except Exception:  # a cloud endpoint that cannot be looked up (cluster down): one lock per target kind
        endpoint = ""
    key = hashlib.sha256(f"{target.name}|{endpoint}".encode()).hexdigest()[:16]
    return local_settings().home / "locks" / f"serve-config-{target.name}-{key}.lock"


@contextmanager
def cluster_lock(target: Target, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Hold the cluster's Serve-config lock (one raylift writer at a time), waiting up to ``wait_s``."""
    path = lock_path_for(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as fh:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServeConfigConflictError(
                        f"Another raylift step has held the Serve config lock of this cluster ({path}) for over "
                        f"{wait_s:.0f}s; nothing was applied. Wait for it to finish, then run this again."
                    ) from None
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def write_serve_config(target: Target, config: dict[str, Any], *, read: dict[str, Any]) -> None:
    """PUT ``config``, which the caller built from ``read``, unless the cluster's config changed since."""
    with cluster_lock(target):
        now = target.current_serve_config()
        if config_hash(now) != config_hash(read):
            raise ServeConfigConflictError(
                f"The cluster's Serve config changed since this step read it ({describe_change(read, now)}); "
                "nothing was applied, so that change is kept. Run this step again to build on it."
            )
        target.apply_serve_config(config)


def update_serve_config(target: Target, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Under the cluster's lock: read the config, apply ``change(current)``; returns what was applied."""
    with cluster_lock(target):
        config = change(target.current_serve_config())
        target.apply_serve_config(config)
        return config
