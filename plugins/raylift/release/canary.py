"""A candidate Serve config as a canary: its own Serve app beside the app that serves, never in its place.

Kayenta's move, on one Ray cluster: the changed config runs as ``<app>-canary`` (one replica, at
``/_canary/<app>``) while ``<app>`` keeps serving users unchanged; the benchmark sends the same prompts to both
at the same time, at the same load per replica (the serving app is the baseline), so a slow spell of the
machine hits both. Only a candidate that passes becomes ``<app>`` (start-before-stop); any other outcome
removes the canary, and no user request ever met it.

Room: the canary is sized by the same fit check as any deploy. A cluster with no room for it borrows one
replica's capacity of the serving app when that app has 2 or more fixed replicas (a lightweight
``num_replicas`` change: Serve drains the replica, no request fails) and gives it back when the canary goes;
otherwise the release is refused before anything is applied, naming the numbers.

The baseline arm: when there is room for one more replica beside the canary, a fresh replica of the anchor's
config (or of the serving config, when no anchor config is recorded) runs as ``<app>-baseline`` (one replica,
at ``/_baseline/<app>``), and the canary is judged against it, not against the serving app. Both arms are then
equally new and neither carries user traffic: on the real stack a fresh replica of the serving config measured
+54 % slower than the serving app itself (A/A), which rolled back unchanged releases (``bench/gate_real_aa.py``). Without room,
or when a user's app holds the name, the serving app is the baseline as before, and the plan says why.

The baseline is optional to the release: it is written only once the canary is RUNNING (:func:`with_baseline`,
a second write), so it never takes the canary's room, and it gets a bounded wait. Ray's scheduler is the judge
of room: the fit check counts what the apps declare, and a cluster whose free CPUs are fewer than that (a vLLM
engine's own actors) cannot place it. A baseline that is not RUNNING in time is removed and the serving app is
the baseline arm (:func:`without_fresh_baseline`, the reason in ``baseline_note``).

Pure config transformations: the operators read the cluster, write under its lease and wait.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from raylift.errors import RayliftValueError, ServeFitError
from raylift.release.decision import FRESH_ANCHOR, FRESH_SERVING, SERVING
from raylift.release.state import DeploymentState
from raylift.serve.config import app_by_name, config_hash, merge_app

#: A target's room for the fresh baseline arm: the baseline app as the target gives it room (``Target``'s optional
#: ``baseline_arm_room``, e.g. ``raylift.targets.local``'s logical resources), or None: as the source app asks.
BaselineRoom = Callable[[dict[str, Any]], dict[str, Any]]

Fits = Callable[[dict[str, Any], list[dict[str, Any]]], Any]

CANARY_SUFFIX = "-canary"
BASELINE_SUFFIX = "-baseline"
CANARY_REPLICAS = 1


class CanaryRoomError(ServeFitError):
    """The cluster has no room for a one-replica canary and the serving app has no replica to lend."""


class CanaryNameTakenError(RayliftValueError):
    """An app raylift did not start for this release already has the canary's name: it is never overwritten."""


def canary_name(app_name: str) -> str:
    return f"{app_name}{CANARY_SUFFIX}"


def canary_route(app_name: str) -> str:
    return f"/_canary/{app_name}"


def baseline_name(app_name: str) -> str:
    return f"{app_name}{BASELINE_SUFFIX}"


def baseline_route(app_name: str) -> str:
    return f"/_baseline/{app_name}"


@dataclass(frozen=True)
class CanaryPlan:
    """What a canary release runs while it is judged, and what it needs to promote or undo itself.

    ``candidate`` is the app entry as it will serve once promoted (its name, route and replicas);
    ``canary`` the same code and args as a 1-replica app of its own; ``serving`` the serving app as it runs
    while the canary does (one replica fewer when ``lent``); ``baseline_scale``: the baseline arm's replicas,
    the load factor that gives both arms the same load per replica. ``baseline``: the fresh baseline app
    (None: the serving app is the baseline arm), ``baseline_runs`` what it runs (``raylift.release``'s
    ``fresh-anchor``, ``fresh-serving`` or ``serving``), ``baseline_note`` why, when it is the serving app;
    ``baseline_source``: the config hash of the app entry the fresh baseline replicates (equal to the candidate's:
    the two arms run the same config, an A/A the gate learns its noise from)."""

    app_name: str
    candidate: dict[str, Any]
    canary: dict[str, Any]
    serving: dict[str, Any]
    serving_before: dict[str, Any]
    lent: int
    baseline_scale: int
    baseline: dict[str, Any] | None = None
    baseline_runs: str = "serving"
    baseline_note: str = ""
    baseline_source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CanaryPlan:
        return cls(**raw)


def fixed_replicas(app: dict[str, Any]) -> int | None:
    """The app's replicas when every deployment has a fixed count (their least), None with autoscaling."""
    counts = []
    for dep in app.get("deployments", []):
        if isinstance(dep.get("autoscaling_config"), dict):
            return None
        counts.append(int(dep.get("num_replicas", 1)))
    return min(counts) if counts else 1


def canary_app(candidate: dict[str, Any], app_name: str) -> dict[str, Any]:
    """The candidate as a 1-replica app of its own (no autoscaling, no surge: nothing rolls out in it)."""
    app = copy.deepcopy(candidate)
    app["name"] = canary_name(app_name)
    app["route_prefix"] = canary_route(app_name)
    for dep in app.get("deployments", []):
        dep.pop("autoscaling_config", None)
        dep.pop("max_surge_percent", None)
        dep["num_replicas"] = CANARY_REPLICAS
    return app


def fresh_baseline_app(source: dict[str, Any], app_name: str, room: BaselineRoom | None = None) -> dict[str, Any]:
    """``source`` (the anchor's or the serving app's entry) as a 1-replica app of its own: the baseline arm, in the
    room the target gives it (``room``)."""
    app = canary_app(source, app_name)
    app["name"] = baseline_name(app_name)
    app["route_prefix"] = baseline_route(app_name)
    return room(app) if room is not None else app


def same_config_arms(plan: CanaryPlan) -> bool:
    """Whether the canary and its fresh baseline run the same app config (an A/A release)."""
    return (plan.baseline is not None and plan.baseline_runs != SERVING and bool(plan.baseline_source)
            and plan.baseline_source == config_hash(plan.candidate))


def lend_one(serving: dict[str, Any]) -> dict[str, Any]:
    """The serving app with one replica fewer per deployment (a lightweight change: no replica restarts)."""
    app = copy.deepcopy(serving)
    for dep in app.get("deployments", []):
        dep["num_replicas"] = int(dep.get("num_replicas", 1)) - 1
    return app


def plan_canary(
    candidate: dict[str, Any],
    current: dict[str, Any],
    app_name: str,
    fits: Callable[[dict[str, Any], list[dict[str, Any]]], Any],
    *,
    anchor_app: dict[str, Any] | None = None,
    room: BaselineRoom | None = None,
) -> CanaryPlan:
    """Where the canary runs: beside the serving app if ``fits(canary, other_apps)`` passes (it raises
    ServeFitError otherwise), else on one replica lent by the serving app; CanaryRoomError when neither. Then
    the baseline arm (:func:`with_fresh_baseline`): a fresh replica of ``anchor_app`` (the anchor's entry, when
    recorded) or of the serving app, where it fits beside both."""
    plan = _place_canary(candidate, current, app_name, fits)
    return with_fresh_baseline(plan, current, fits, anchor_app, room)


def plan_or_resume(state: DeploymentState, run_id: str, candidate: dict[str, Any], current: dict[str, Any],
                   app_name: str, fits: Fits, room: BaselineRoom | None = None) -> tuple[CanaryPlan, bool]:
    """This run's canary plan, and whether it is an earlier try's. A retry whose earlier try applied this canary and
    died keeps that plan (what the serving app lent is known only to it; planned again, the lent-from app would look
    like a 1-replica app of its own). Otherwise :func:`plan_canary`, whose baseline arm runs the anchor's own config
    when the anchor recorded it (the change measured is then the change since the anchor)."""
    from raylift.release.rollout import restarts_replicas

    saved = state.canary(run_id)
    earlier = CanaryPlan.from_dict(saved) if saved is not None else None
    serving = app_by_name(current, app_name)
    if (earlier is not None and earlier.candidate == candidate and serving is not None
            and not restarts_replicas(earlier.serving, serving)):
        return earlier, True
    anchor_app = (state.anchor() or {}).get("app")
    return plan_canary(candidate, current, app_name, fits,
                       anchor_app=anchor_app if isinstance(anchor_app, dict) else None, room=room), False


def with_fresh_baseline(plan: CanaryPlan, current: dict[str, Any],
                        fits: Callable[[dict[str, Any], list[dict[str, Any]]], Any],
                        anchor_app: dict[str, Any] | None, room: BaselineRoom | None = None) -> CanaryPlan:
    """``plan`` with a fresh baseline app where one fits beside the serving app and the canary (never on a
    lent replica); the serving app stays the baseline arm otherwise, and ``baseline_note`` says why."""
    name = baseline_name(plan.app_name)
    if plan.lent:
        return replace(plan, baseline_note="no room for a fresh baseline replica: the canary runs on a replica "
                                           "the serving app lent, so the serving app is the baseline arm")
    taken = app_by_name(current, name)
    if taken is not None:
        return replace(plan, baseline_note=f"app {name!r} already runs on the cluster and is not this release's: "
                                           "raylift leaves it alone, so the serving app is the baseline arm")
    source, runs = (anchor_app, FRESH_ANCHOR) if anchor_app else (plan.serving, FRESH_SERVING)
    baseline = fresh_baseline_app(source, plan.app_name, room)
    others = [plan.serving if a.get("name") == plan.app_name else a for a in current.get("applications", [])
              if a.get("name") not in (name, plan.canary["name"])]
    try:
        fits(baseline, [*others, plan.canary])
    except ServeFitError as exc:
        return replace(plan, baseline_note=f"no room for a fresh baseline replica beside the canary ({exc}): "
                                           "the serving app is the baseline arm")
    return replace(plan, baseline=baseline, baseline_runs=runs, baseline_scale=1, baseline_source=config_hash(source))


def _place_canary(
    candidate: dict[str, Any],
    current: dict[str, Any],
    app_name: str,
    fits: Callable[[dict[str, Any], list[dict[str, Any]]], Any],
) -> CanaryPlan:
    serving = app_by_name(current, app_name)
    if serving is None:
        raise ValueError(f"app {app_name!r} is not serving: a first deploy needs no canary")
    canary = canary_app(candidate, app_name)
    taken = app_by_name(current, canary["name"])
    if taken is not None:
        # this release has not started its canary yet (a retry keeps its saved plan and never gets here), so
        # an app of that name is someone else's (a user's own app, or a canary an earlier run left): overwriting
        # it, and removing it when this release ends, would undo their work
        raise CanaryNameTakenError(
            f"App {canary['name']!r} already runs on the cluster (route {taken.get('route_prefix') or '/'!r}), "
            f"and it is not this release's canary: a canary release of app {app_name!r} needs that name. Nothing "
            f"was applied, and raylift will not touch that app. Rename or remove it (raylift_undeploy with "
            f"app_name {canary['name']!r} if it is a canary an earlier run left), or set the release Param to "
            "'direct'.")
    others = [a for a in current.get("applications", []) if a.get("name") != canary["name"]]
    replicas = fixed_replicas(serving)
    try:
        fits(canary, others)
        return CanaryPlan(app_name, candidate, canary, serving, serving, 0, replicas or 1)
    except ServeFitError as beside:
        if replicas is None or replicas < 2:
            how = ("it autoscales" if replicas is None else f"it has {replicas} replica")
            raise CanaryRoomError(
                f"No room for a {CANARY_REPLICAS}-replica canary of app {app_name!r} beside what serves ({beside}), "
                f"and the serving app cannot lend one replica's capacity ({how}; lending needs 2 or more fixed "
                "replicas). Nothing was applied. Add a worker (the workers Param), give the app 2 or more "
                "replicas, or set the release Param to 'direct' (judged after it takes all traffic)."
            ) from None
        lent = lend_one(serving)
        try:
            fits(canary, [lent if a.get("name") == app_name else a for a in others])
        except ServeFitError as lending:
            raise CanaryRoomError(
                f"No room for a {CANARY_REPLICAS}-replica canary of app {app_name!r}, even with one of its "
                f"{replicas} replicas lent ({lending}). Nothing was applied. Add a worker or set the release "
                "Param to 'direct'."
            ) from None
        return CanaryPlan(app_name, candidate, canary, lent, serving, 1, replicas - 1)


def with_canary(current: dict[str, Any], plan: CanaryPlan, defaults: dict[str, Any]) -> dict[str, Any]:
    """The cluster's config while the canary starts: the serving app (lent from, or as it was) plus the canary
    (its fresh baseline comes in a second write, :func:`with_baseline`, once the canary is RUNNING)."""
    config = merge_app(current, plan.serving, defaults=defaults)
    return merge_app(config, plan.canary, defaults=defaults)


def with_baseline(current: dict[str, Any], plan: CanaryPlan) -> dict[str, Any]:
    """``current`` (the canary RUNNING) plus the plan's fresh baseline app."""
    if plan.baseline is None:
        raise ValueError("the plan has no fresh baseline app")
    return merge_app(current, plan.baseline, defaults=current)


def without_baseline(current: dict[str, Any], plan: CanaryPlan) -> dict[str, Any]:
    """``current`` without the plan's fresh baseline app (the canary and the serving app as they are)."""
    config = copy.deepcopy(current)
    gone = plan.baseline["name"] if plan.baseline else None
    config["applications"] = [a for a in config.get("applications", []) if a.get("name") != gone]
    return config


def uses_fresh_baseline(plan: CanaryPlan) -> bool:
    """Whether the canary is judged against the plan's fresh baseline app (not the serving app)."""
    return plan.baseline is not None and plan.baseline_runs != SERVING


def without_fresh_baseline(plan: CanaryPlan, why: str) -> CanaryPlan:
    """``plan`` judged against the serving app, ``why`` recorded. The baseline app stays in the plan (what the
    release may have started): rollback and promote still remove it, and nothing else by that name."""
    return replace(plan, baseline_runs=SERVING, baseline_note=why,
                   baseline_scale=max(fixed_replicas(plan.serving) or 1, 1))


def release_apps(plan: CanaryPlan) -> set[str]:
    """The apps this release started beside the serving app: the canary and its fresh baseline."""
    return {plan.canary["name"], *([plan.baseline["name"]] if plan.baseline else [])}


def without_canary(current: dict[str, Any], plan: CanaryPlan) -> dict[str, Any]:
    """``current`` without the canary app, and with a lent replica given back to the serving app when it still
    runs the lent version (an app someone changed since is left as it is)."""
    config = copy.deepcopy(current)
    apps = [a for a in config.get("applications", []) if a.get("name") not in release_apps(plan)]
    if plan.lent:
        apps = [copy.deepcopy(plan.serving_before) if a.get("name") == plan.app_name and _same_version(a, plan.serving)
                else a for a in apps]
    config["applications"] = apps
    return config


def promoted(current: dict[str, Any], plan: CanaryPlan, surge_app: dict[str, Any]) -> dict[str, Any]:
    """``current`` with the canary removed and the app running the candidate (``surge_app``: the candidate
    with its rollout's ``max_surge_percent``), in one write: Serve starts the new replicas before it stops
    the old ones, on the capacity the canary gives back."""
    config = copy.deepcopy(current)
    config["applications"] = [a for a in config.get("applications", []) if a.get("name") not in release_apps(plan)]
    return merge_app(config, surge_app, defaults=config)


def kept_replicas(candidate: dict[str, Any], planned: dict[str, Any], now: dict[str, Any]
                  ) -> tuple[dict[str, Any], list[str]]:
    """``candidate`` with the replica counts someone else set on the serving app while the canary ran (a hand
    scale-up), and what was kept: a deployment whose ``num_replicas`` or ``autoscaling_config`` in ``now``
    differs from what this release left it at (``planned``: the serving app as the canary plan ran it) keeps
    ``now``'s; one nobody changed takes the candidate's own."""
    out = copy.deepcopy(candidate)
    before = {d.get("name"): d for d in planned.get("deployments", [])}
    after = {d.get("name"): d for d in now.get("deployments", [])}
    kept: list[str] = []
    for dep in out.get("deployments", []):
        was, is_now = before.get(dep.get("name")), after.get(dep.get("name"))
        if was is None or is_now is None:
            continue
        if is_now.get("autoscaling_config") != was.get("autoscaling_config") and is_now.get("autoscaling_config"):
            dep["autoscaling_config"] = copy.deepcopy(is_now["autoscaling_config"])
            dep.pop("num_replicas", None)
            kept.append(f"{dep.get('name')}: autoscaling {is_now['autoscaling_config']}")
        elif is_now.get("num_replicas") != was.get("num_replicas") and "num_replicas" in is_now:
            dep["num_replicas"] = is_now["num_replicas"]
            dep.pop("autoscaling_config", None)
            kept.append(f"{dep.get('name')}: {was.get('num_replicas')} -> {is_now['num_replicas']} replicas")
    return out, kept


def _same_version(a: dict[str, Any], b: dict[str, Any]) -> bool:
    from raylift.release.rollout import restarts_replicas

    return not restarts_replicas(a, b)
