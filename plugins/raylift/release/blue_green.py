"""A blue/green release: the candidate on a second cluster beside the serving one, the endpoint switched on promote.

Chosen by :func:`raylift.release.plan.plan_release` for a change the serving cluster cannot run (the target's
``cluster_change``: a new runtime env, image, Ray or vLLM version). The serving ("blue") cluster is never written
to: the candidate ("green") cluster is started from the new runtime or image, given the serving cluster's whole
Serve config with the candidate's app entry (every other app keeps serving after the switch), and judged beside
the serving app the way a canary is (same prompts, rounds and load per replica; :mod:`raylift.release.measured`).
Promote switches the endpoint, then retires blue once its requests in flight finish; a rejection (or any failure)
stops green, and blue never changed. The record (``DeploymentState.blue_green``) says how far it got, so a retried
step resumes and rollback knows whether the switch happened.
"""

from __future__ import annotations

import logging
from typing import Any

from raylift.errors import DeployError
from raylift.release.state import DeploymentState
from raylift.release.writer import write_serve_config
from raylift.serve.config import app_by_name, app_url, config_hash, merge_app
from raylift.targets.base import ClusterPair, Target

log = logging.getLogger(__name__)

STARTED, SWITCHED, RETIRED, REMOVED = "started", "switched", "retired", "removed"


def pair_of(target: Target, state: DeploymentState, run_id: str) -> tuple[ClusterPair, dict[str, Any] | None]:
    """This run's two clusters: as its record has them (a retried step), else the target's pair now."""
    record = state.blue_green(run_id)
    if record is not None:
        return ClusterPair(str(record["serving"]), str(record["candidate"])), record
    return target.blue_green_pair(), None


def green_config(current: dict[str, Any], app: dict[str, Any], green: Target, *,
                 defaults: dict[str, Any]) -> dict[str, Any]:
    """What the candidate cluster gets: the serving cluster's every app, ``app`` merged in, and the candidate
    cluster's own cluster-wide options (where its Serve listens)."""
    base = {**current, **green.serve_cluster_options()} if current.get("applications") else {}
    return merge_app(base, app, defaults={**defaults, **green.serve_cluster_options()})


def start_blue_green(target: Target, state: DeploymentState, run_id: str, app: dict[str, Any],
                     current: dict[str, Any], app_name: str, *, defaults: dict[str, Any], change: str,
                     timeout_s: float | None = None, log: Any = log) -> tuple[dict[str, Any], Target]:
    """Start the candidate cluster beside the serving one (as many workers), write it the serving config with the
    candidate's app, and return (that config, a target on the candidate cluster) for the deploy step's wait. The
    record keeps the run's ``deploy_timeout_s`` (``timeout_s``) for the switch's and the removal's waits."""
    pair, record = pair_of(target, state, run_id)
    if record is not None:
        log.warning("an earlier try of run %s started this blue/green release: finishing it", run_id)
    workers = max(target.cluster_state().nodes - 1, 0)
    state.save_blue_green(run_id, {"serving": pair.serving, "candidate": pair.candidate, "change": change,
                                   "stage": STARTED, "serving_config_hash": config_hash(current),
                                   "workers": workers, **({"timeout_s": float(timeout_s)} if timeout_s else {})})
    log.info(
        "blue/green release (%s): starting the %s cluster with %d worker(s) beside the serving %s cluster, which "
        "takes every user request until the gate promotes the candidate; the %s cluster is not written to",
        change, pair.candidate, workers, pair.serving, pair.serving)
    target.start_cluster(pair.candidate, workers=workers)
    green = target.on_cluster(pair.candidate)
    config = green_config(current, app, green, defaults=defaults)
    write_serve_config(green, config, read=green.current_serve_config())
    log.info("the %s cluster got the serving config with the candidate app %r (%d app(s)); waiting for RUNNING",
             pair.candidate, app_name, len(config["applications"]))
    return config, green


def arms(target: Target, state: DeploymentState, run_id: str, config: dict[str, Any],
         app_name: str) -> dict[str, Any]:
    """Where the deploy step says the two arms answer: the candidate on its own cluster, the serving app on the
    serving cluster's own Serve port (not through the endpoint, so each arm is one hop)."""
    pair, _ = pair_of(target, state, run_id)
    app = app_by_name(config, app_name) or {}
    return {"release": "blue_green", "endpoint": app_url(target.on_cluster(pair.candidate).endpoint_url(), app),
            "baseline_endpoint": app_url(target.on_cluster(pair.serving).endpoint_url(), app),
            "baseline_scale": 1, "baseline_app": app_name, "canary_app": app_name,
            "serving_cluster": pair.serving, "candidate_cluster": pair.candidate}


def switch_blue_green(target: Target, state: DeploymentState, run_id: str, *,
                      log: Any = log) -> tuple[ClusterPair, dict[str, Any]]:
    """Switch the endpoint to the candidate cluster (once: a retried step finds it switched); the pair, the record."""
    pair, record = pair_of(target, state, run_id)
    if record is None:
        raise DeployError(f"promote: run {run_id} has no blue/green record: nothing to switch")
    if record.get("stage") == STARTED:
        target.switch_endpoint(pair.candidate, timeout_s=record.get("timeout_s"))
        record = {**record, "stage": SWITCHED}
        state.save_blue_green(run_id, record)
        log.info("promote: the endpoint sends new requests to the %s cluster", pair.candidate)
    return pair, record


def blue_drain_trigger(target: Target, state: DeploymentState, run_id: str, *, log: Any = log) -> Any:
    """Switch, then the wait for the serving cluster's requests in flight to end before it is retired, where the
    target has one to defer on (``drain_trigger``: ECS); None where there is nothing to wait for here (retired
    already, or the target's ``retire_cluster`` waits itself)."""
    pair, record = switch_blue_green(target, state, run_id, log=log)
    drain = getattr(target, "drain_trigger", None)
    if record.get("stage") != SWITCHED or drain is None:
        return None
    return drain(pair.serving)


def promote_blue_green(target: Target, state: DeploymentState, run_id: str, *, drained: dict[str, Any] | None = None,
                       log: Any = log) -> str:
    """Switch the endpoint to the candidate cluster, then retire the serving one once its requests in flight end
    (``drained``: the event of the target's drain wait, where the caller deferred on it); says what was done."""
    pair, record = switch_blue_green(target, state, run_id, log=log)
    done = f"the endpoint serves the {pair.candidate} cluster"
    if record.get("stage") == SWITCHED:
        retire: Any = target.retire_cluster
        retired = retire(pair.serving) if drained is None else retire(pair.serving, drained=drained)
        state.save_blue_green(run_id, {**record, "stage": RETIRED})
        done += f"; {retired}"
    log.info("promote: %s", done)
    return done


def undo_blue_green(target: Target, state: DeploymentState, run_id: str) -> str | None:
    """The rollback's part: a candidate cluster the endpoint never switched to is stopped (the serving cluster was
    never written to); after the switch, nothing (the candidate serves: promote's retire finishes on a retry).
    None: this run was no blue/green release."""
    record = state.blue_green(run_id)
    if record is None:
        return None
    pair = ClusterPair(str(record["serving"]), str(record["candidate"]))
    if record.get("stage") != STARTED:
        return (f"the endpoint already serves the {pair.candidate} cluster (stage {record.get('stage')}): nothing "
                "rolled back")
    removed = target.remove_cluster(pair.candidate, timeout_s=record.get("timeout_s"))
    state.save_blue_green(run_id, {**record, "stage": REMOVED})
    return f"{removed}; the {pair.serving} cluster serves, never changed"
