"""Which kind of release a change gets: the one place that chooses between a canary and a direct apply.

``release: canary`` (the default) judges a changed app beside the serving one; it falls back to a direct apply when
there is nothing to judge beside (a first deploy) or nothing that restarts a replica (a replica count, an
autoscaling bound: Serve applies it in place). ``release: direct`` is always direct, and judged against the anchor
(:mod:`raylift.release.decision`). The deploy operator carries the plan out; it does not choose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from raylift.errors import RayliftValueError
from raylift.release.rollout import restarts_replicas

ReleaseKind = Literal["canary", "direct"]
RELEASES: tuple[ReleaseKind, ...] = ("canary", "direct")


@dataclass(frozen=True)
class ReleasePlan:
    """The kind of release, and why (logged by the step that carries it out)."""

    kind: ReleaseKind
    why: str


def plan_release(requested: object, app_name: str, serving: dict[str, Any] | None,
                 candidate: dict[str, Any]) -> ReleasePlan:
    """The release ``candidate`` gets against the app entry that serves now (``serving``; None: none does).

    :raises RayliftValueError: ``requested`` is not one of :data:`RELEASES`."""
    release = str(requested or "canary")
    if release not in RELEASES:
        raise RayliftValueError(f"'release' must be one of {list(RELEASES)}, got {release!r}: 'canary' judges a "
                                "changed app beside the serving one, 'direct' applies it to the app itself.")
    if release == "direct":
        return ReleasePlan("direct", "release: direct, asked for")
    if serving is None:
        return ReleasePlan("direct", f"app {app_name!r} is not serving: a first deploy, applied directly (no "
                                     "canary to compare)")
    if not restarts_replicas(serving, candidate):
        return ReleasePlan("direct", f"the change to app {app_name!r} restarts no replica (or there is none): "
                                     "applied directly")
    return ReleasePlan("canary", f"app {app_name!r} changes its code: a canary beside the serving app")
