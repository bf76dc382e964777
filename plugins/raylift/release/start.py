"""A release's first write, for the kind :func:`raylift.release.plan.plan_release` chose: what Serve gets, and which
apps to wait for.

Why in the release package: what is recorded before the PUT (the snapshot rollback restores, the canary's plan) and
what is written are one decision about "nothing already serving is lost"; the deploy step only carries it out and
waits. Every write is under the cluster's lock and only if nobody changed the config since it was read
(``raylift.release.writer``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from raylift.errors import DeployError
from raylift.release.canary import CanaryPlan, baseline_name, canary_name, plan_or_resume, with_canary
from raylift.release.rollout import check_rollout_fits, with_native_surge
from raylift.release.state import DeploymentState
from raylift.release.writer import write_serve_config
from raylift.serve.config import app_by_name, app_kind, app_url, config_hash, merge_app
from raylift.serve.validation import Cluster, FitReport, check_fit
from raylift.targets.base import ServeSchemaChecker, Target

log = logging.getLogger(__name__)

Fits = Callable[[dict[str, Any], dict[str, Any]], None]


@dataclass(frozen=True)
class Started:
    """What a release wrote: the whole config, the apps to wait for, and whether the app goes dark meanwhile."""

    kind: str
    config: dict[str, Any]
    waiting: list[str]
    dark: bool = False


# the apps whose config Ray's schema check judged, per target (one per deploy task): what its later fit checks weigh
# are raylift's own shapes of that app (its surge peak, its canary and fresh baseline), whose fields Ray already judged
_SCHEMA_CHECKED: weakref.WeakKeyDictionary[Target, set[str]] = weakref.WeakKeyDictionary()


def check_serve_schema(target: Target, app: dict[str, Any], current: dict[str, Any], *, log: Any = log) -> list[str]:
    """Ray's own schema check of the config this release writes (``app`` beside ``current``'s other apps), by the Ray
    that will run it, where the target can run it (``ServeSchemaChecker``); once per deploy task. Returns Ray's
    warnings; ServeFitError with Ray's refusal. A target without the capability leaves it to the cluster at apply,
    and the task log says so."""
    name = str(app.get("name"))
    checked = _SCHEMA_CHECKED.setdefault(target, set())
    if any(name in (done, canary_name(done), baseline_name(done)) for done in checked):
        return []
    config = {"applications": [app, *(a for a in current.get("applications", []) if a.get("name") != name)]}
    warnings: list[str] = []
    if isinstance(target, ServeSchemaChecker):
        warnings = target.check_serve_schema(config, name)
    else:
        log.info(
            "Ray's Serve schema check of app %r is left to the cluster at apply: the %s target cannot run the "
            "cluster's Ray before the deploy, so a field Ray refuses fails the apply there (the deploy rolls back). "
            "raylift's own rules and the fit are checked here.",
            name, target.name)
    checked.add(name)
    return warnings


def fit_check(target: Target, app: dict[str, Any], current: dict[str, Any], *, log: Any = log) -> FitReport:
    """Refuse (ServeFitError naming the numbers), before anything is applied, an app whose config is invalid or cannot
    fit the cluster beside ``current``'s other apps; each line of the check logged. Ray's schema check (by the
    cluster's Ray, :func:`check_serve_schema`) first, then raylift's own rules and the fit (``check_fit``)."""
    state = target.cluster_state()
    cluster = Cluster(totals=dict(state.resources), nodes=tuple(state.node_resources))
    warnings = check_serve_schema(target, app, current, log=log)
    report = check_fit(app, cluster, others=current.get("applications", []), vllm=app_kind(app).vllm)
    report.warnings[:0] = warnings
    for line in report.lines:
        log.info("fits: %s", line)
    for warning in report.warnings:
        log.warning("%s", warning)
    return report


def check_release_fits(kind: str, app: dict[str, Any], current: dict[str, Any], app_name: str, surge: int,
                       fits: Fits, *, log: Any = log) -> bool:
    """The fit check the release needs: a canary's own shape (its room beside the serving app is ``plan_canary``'s; a
    canary an earlier try of this run started is not another app's room), a direct release's at its rollout's peak.
    Returns whether the app goes dark while new replicas load (a stop-before-start direct release)."""
    if kind == "canary":
        others = [a for a in current.get("applications", []) if a.get("name") != canary_name(app_name)]
        fits(app, {**current, "applications": others})
        return False
    if kind == "blue_green":  # a cluster of the serving one's shape, with its other apps and this one
        others = [a for a in current.get("applications", []) if a.get("name") != app_name]
        fits(app, {**current, "applications": others})
        return False
    return check_rollout_fits(app, current, app_name, surge, fits, log=log)


def start_canary(target: Target, state: DeploymentState, run_id: str, app: dict[str, Any], current: dict[str, Any],
                 app_name: str, *, defaults: dict[str, Any], surge: int, fits: Fits, timeout_s: float | None = None,
                 log: Any = log) -> Started:
    """Start the candidate as ``<app>-canary`` beside the serving app (on a lent replica if it must); the serving app
    takes all user traffic and is not changed until the gate promotes the candidate."""
    # the target's room for the fresh baseline arm (local: logical resources chosen for it), else as the app asks
    plan, resumed = plan_or_resume(state, run_id, app, current, app_name,
                                   lambda a, others: fits(a, {"applications": others}),
                                   getattr(target, "baseline_arm_room", None))
    if resumed:
        log.warning("an earlier try of run %s started this canary and did not finish: finishing it", run_id)
    config = with_canary(current, plan, defaults)
    state.save_canary(run_id, plan.as_dict())
    state.begin_apply(run_id, current, config, surge=surge, timeout_s=timeout_s)  # what rollback undoes if it dies
    waiting = [plan.canary["name"], *([app_name] if plan.lent else [])]
    log.info(
        "canary release: starting the candidate as app %r at %s beside the serving app %r%s; the serving app takes "
        "all user traffic and is not changed until the gate promotes the candidate. Waiting for %s.",
        plan.canary["name"], plan.canary["route_prefix"], app_name,
        f" (which lends it one of its {plan.baseline_scale + plan.lent} replicas: no room beside it)"
        if plan.lent else "", waiting)
    if plan.baseline is None:
        log.warning("baseline arm: the serving app, under its live traffic (%s)", plan.baseline_note)
    write_serve_config(target, config, read=current)
    return Started("canary", config, waiting)


def direct_config(current: dict[str, Any], app: dict[str, Any], *, defaults: dict[str, Any],
                  surge: int) -> dict[str, Any]:
    """The whole Serve config a direct release writes: ``current`` with ``app`` merged in, with Serve's own
    start-before-stop (``raylift.release.rollout``: a lightweight option, harmless on a new app)."""
    return merge_app(current, with_native_surge(app, surge), defaults=defaults)


def start_direct(target: Target, state: DeploymentState, run_id: str, app: dict[str, Any], current: dict[str, Any],
                 app_name: str, *, defaults: dict[str, Any], surge: int, dark: bool, timeout_s: float | None = None,
                 log: Any = log) -> Started:
    """Apply ``app`` to the app itself, judged while it serves. Before the PUT: what serves now and what this run
    applies ("applied, not yet proven"). A retry whose earlier try applied and then died (worker lost after the PUT)
    gets that try's snapshot back: the rollback target stays what served before the run, and the rollout is finished
    from it."""
    config = direct_config(current, app, defaults=defaults, surge=surge)
    if state.begin_apply(run_id, current, config, surge=surge, timeout_s=timeout_s) is not None:
        log.warning(
            "an earlier try of run %s applied a config for app %r and did not finish (its worker stopped after the "
            "PUT?): finishing the rollout from the config that served before that try", run_id, app_name,
        )
    write_serve_config(target, config, read=current)
    log.info(
        "submitted Serve config %s (app %r, %s app(s) in total%s); waiting for RUNNING", config_hash(config)[:12],
        app_name, len(config["applications"]),
        f", start-before-stop with {surge} surge replica(s)" if surge and not dark else "",
    )
    return Started("direct", config, [app_name], dark)


def running_result(config: dict[str, Any], app_name: str, endpoint: str, canary: CanaryPlan | None) -> dict[str, Any]:
    """What the deploy step hands on once Serve runs the release: the app's kind, route and config hash, and where it
    answers; in a canary release the candidate, which answers at the canary's route."""
    app = app_by_name(config, app_name) or {}
    out: dict[str, Any] = {
        "app_name": app_name, "release": "canary" if canary else "direct", "kind": app_kind(app).name,
        "route_prefix": app.get("route_prefix") or "/", "config_hash": config_hash(config),
        "endpoint": app_url(endpoint, app),
    }
    if canary is not None:
        out.update(endpoint=app_url(endpoint, canary.canary), canary_app=canary.canary["name"],
                   route_prefix=canary.canary["route_prefix"])
    return out


def deploy_failed(event: dict[str, Any], app_name: str, kind: str) -> DeployError:
    """Serve's own word on a release that never ran (the wait's event), and what happens next."""
    return DeployError(
        f"Serve app {event.get('app') or app_name!r} did not deploy "
        f"({event.get('app_status') or event.get('status')}): {event.get('message', 'unknown')}\n"
        + ("The canary never took user traffic; the rollback step removes it. " if kind == "canary"
           else "The candidate's cluster never took user traffic; the rollback step stops it. "
           if kind == "blue_green" else "The rollback step restores what served before this run. ")
        + "Fix the app/config and redeploy."
    )
