"""Which kind of release a change gets: the one place that chooses between a canary and a direct apply.

``release: canary`` (the default) judges a changed app beside the serving one; it falls back to a direct apply when
there is nothing to judge beside (a first deploy) or nothing that restarts a replica (a replica count, an
autoscaling bound: Serve applies it in place). ``release: direct`` is always direct, and judged against the anchor
(:mod:`raylift.release.decision`). The deploy operator carries the plan out; it does not choose.

A change the serving cluster cannot run (a new image, Ray or vLLM version, runtime or node shape: the target names
it, ``cluster_change``) needs a second cluster: ``blue_green``, the candidate judged on a new cluster beside the
serving one and the endpoint switched only when the gate promotes. A canary on the serving cluster would judge the
old image, and an in-place change of the cluster stops every app on it: ``release: direct`` keeps that (an announced
outage, said as such).

A cluster that serves no app has nothing to protect: it is never released blue/green. The target answers that, for
it reads the cluster (this layer sits above the targets): its ``cluster_change`` is None while no Serve app runs
(EKS: ``EksBlueGreen.cluster_change``; ECS: ``EcsBlueGreen.cluster_change``), so a first deploy is planned as any
first deploy (direct, below), and the target puts the new image on the cluster in place (ECS: the scale step rolls
the services to it whatever the ``release``, ``EcsTarget.scale``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from raylift.errors import RayliftValueError
from raylift.release.rollout import restarts_replicas

ReleaseKind = Literal["canary", "direct", "blue_green"]
RELEASES: tuple[ReleaseKind, ...] = ("canary", "direct")  # what the ``release`` Param may ask for


def replaced_in_place(requested: object) -> bool:
    """Whether the scale step carries out a cluster change in place (an image rollout): for ``release: direct``
    only, or outside a release (``requested`` None: a scale of its own). A canary's cluster change is released
    blue/green by the deploy step, which finds it still to do (``Target.cluster_change``)."""
    return requested in (None, "", "None") or str(requested) == "direct"


@dataclass(frozen=True)
class ReleasePlan:
    """The kind of release, and why (logged by the step that carries it out)."""

    kind: ReleaseKind
    why: str


def plan_release(requested: object, app_name: str, serving: dict[str, Any] | None,
                 candidate: dict[str, Any], *, cluster_change: str | None = None) -> ReleasePlan:
    """The release ``candidate`` gets against the app entry that serves now (``serving``; None: none does), when
    ``cluster_change`` (None: the serving cluster runs it) says why it needs a new cluster.

    :raises RayliftValueError: ``requested`` is not one of :data:`RELEASES`."""
    release = str(requested or "canary")
    if release not in RELEASES:
        raise RayliftValueError(f"'release' must be one of {list(RELEASES)}, got {release!r}: 'canary' judges a "
                                "changed app beside the serving one, 'direct' applies it to the app itself.")
    if release == "direct":
        outage = f"; {cluster_change}: the cluster is replaced in place, an announced outage" if cluster_change else ""
        return ReleasePlan("direct", f"release: direct, asked for{outage}")
    if cluster_change:
        return ReleasePlan("blue_green", f"{cluster_change}: app {app_name!r} is judged on a new cluster beside the "
                                         "serving one, which takes user traffic until the gate promotes it")
    if serving is None:
        return ReleasePlan("direct", f"app {app_name!r} is not serving: a first deploy, applied directly (no "
                                     "canary to compare)")
    if not restarts_replicas(serving, candidate):
        return ReleasePlan("direct", f"the change to app {app_name!r} restarts no replica (or there is none): "
                                     "applied directly")
    return ReleasePlan("canary", f"app {app_name!r} changes its code: a canary beside the serving app")
