"""Put one Serve app back the way it was, leaving every other app alone."""

from __future__ import annotations

import logging
from typing import Any

from raylift.errors import DeployError
from raylift.release.state import DeploymentState
from raylift.serve.config import app_by_name, merge_app
from raylift.targets.base import Target

log = logging.getLogger(__name__)
# How long the rollback waits for Serve to stop listing a removed canary (its replica's graceful shutdown is 20 s).
CANARY_GONE_TIMEOUT_S = 120.0


class RollbackConflictError(DeployError):
    """The app no longer runs what this run wrote (a hand deploy, an undeploy or another run changed it since):
    rollback leaves it as it is, so that change is kept."""


def what_this_run_replaced(
    state: DeploymentState, run_id: str, app_name: str
) -> tuple[dict[str, Any] | None, dict[str, Any], str]:
    """(the app as it served before this run's write or None if it was not deployed, the whole config it came
    from, where that came from). The pre-deploy snapshot is exactly what this run replaced; the last good
    config stands in only for a run that left no snapshot."""
    good = state.last_good()
    good_app = app_by_name(good["config"], app_name) if good else None
    pre = state.pre_deploy(run_id)
    if pre is not None:
        app = app_by_name(pre, app_name)
        if app is None:
            return None, pre, "config that was serving before this run, which had no such app"
        if good is not None and good_app is not None and _same_app(app, good_app):
            return app, pre, f"last good config (run {good['run_id']})"
        return app, pre, "config that was serving before this run"
    if good is not None:
        return good_app, good["config"], f"last good config (run {good['run_id']})"
    return None, {}, "nothing recorded"


def keep_hand_scaling(app: dict[str, Any], ours: dict[str, Any] | None, now: dict[str, Any] | None
                      ) -> tuple[dict[str, Any], list[str]]:
    """``app`` (what a rollback puts back) with the replica counts someone else set since this release left the
    app at ``ours`` (a hand scale-up in Serve's live config, ``now``): the release's own fields (code, model, args)
    are still put back. The rule is promote's (``raylift.release.canary.kept_replicas``); nothing to compare: ``app``."""
    import copy

    from raylift.release.canary import kept_replicas

    if ours is None or now is None:
        return copy.deepcopy(app), []
    return kept_replicas(app, ours, now)


def _kept_note(kept: list[str]) -> str:
    return f" (kept the replica counts set since by someone else: {', '.join(kept)})" if kept else ""


def check_still_ours(state: DeploymentState, run_id: str, app_name: str, current: dict[str, Any]) -> None:
    """Raise RollbackConflictError, naming the change, unless ``app_name`` still runs what this run wrote."""
    from raylift.release.rollout import restarts_replicas

    applied = state.applied(run_id)
    ours = app_by_name(applied["config"], app_name) if applied else None
    now = app_by_name(current, app_name)
    if ours is None:
        raise RollbackConflictError(f"run {run_id} wrote no config for app {app_name!r}, so it has nothing to undo")
    if now is None:
        raise RollbackConflictError(
            f"app {app_name!r} was removed since run {run_id} wrote it (raylift_undeploy or a hand change): "
            "left removed"
        )
    if restarts_replicas(ours, now):
        changed = sorted(k for k in set(ours) | set(now) if k != "deployments" and ours.get(k) != now.get(k))
        raise RollbackConflictError(
            f"app {app_name!r} runs another version than run {run_id} wrote (changed since: "
            f"{', '.join(changed) or 'its deployments'}; a hand serve deploy or another run?): left as it is"
        )


def rollback_surge(target: Target, app: dict[str, Any], current: dict[str, Any], surge: int) -> int:
    """The surge replicas a rollback of ``app`` can use: the run's ``surge_replicas`` when that peak fits the
    cluster, else 0 (stop-before-start, as a full cluster allows). ServeFitError when not even that fits."""
    from raylift.errors import ServeFitError
    from raylift.release.rollout import with_surge
    from raylift.serve.config import app_kind
    from raylift.serve.validation import Cluster, check_fit

    state = target.cluster_state()
    cluster = Cluster(totals=dict(state.resources), nodes=tuple(state.node_resources))
    others = current.get("applications", [])
    vllm = app_kind(app).vllm
    if surge > 0:
        try:
            check_fit(with_surge(app, surge), cluster, others=others, vllm=vllm)
            return surge
        except ServeFitError as exc:
            log.warning("rollback: %d surge replica(s) do not fit (%s); going back stop-before-start", surge, exc)
    check_fit(app, cluster, others=others, vllm=vllm)
    return 0


def restore_app(target: Target, state: DeploymentState, run_id: str, app_name: str) -> str:
    """Put back exactly what this run replaced of ``app_name`` (or remove the app if it was not deployed before),
    only while the app still runs what this run wrote; returns what was done. RollbackConflictError otherwise.

    The failed version may be RUNNING (a smoke test or gate failed), so going back restarts replicas:
    start-before-stop with the run's ``surge_replicas`` when that fits the cluster (else stop-before-start), and
    wait for it as long as the run's ``deploy_timeout_s`` (recorded when it applied; the default for a record
    written before that was kept).
    """
    from raylift.config import DEPLOY_TIMEOUT_S, ROLLOUT_SURGE_REPLICAS
    from raylift.release.rollout import apply_start_before_stop

    current = target.current_serve_config()
    check_still_ours(state, run_id, app_name, current)
    app, saved, source = what_this_run_replaced(state, run_id, app_name)
    kept: list[str] = []
    if app is not None:
        applied_config = (state.applied(run_id) or {}).get("config") or {}
        app, kept = keep_hand_scaling(app, app_by_name(applied_config, app_name), app_by_name(current, app_name))
        restored = merge_app(current, app, defaults=saved)
        action = f"restored app {app_name!r} from the {source}{_kept_note(kept)}"
    else:
        restored = dict(current)
        restored["applications"] = [a for a in current.get("applications", []) if a.get("name") != app_name]
        action = f"removed app {app_name!r} (it had no earlier version: {source})"
    if app is not None:
        from raylift.release.rollout import with_native_surge

        applied = state.applied(run_id) or {}
        surge = rollback_surge(target, app, current, int(applied.get("surge", ROLLOUT_SURGE_REPLICAS)))
        if surge == 0:  # no surge at all, whatever Serve's echo of an earlier rollout carried
            restored = merge_app(current, with_native_surge(app, 0), defaults=saved)
            action += " (stop-before-start)"
        wait_s = float(applied.get("timeout_s") or DEPLOY_TIMEOUT_S)
        event = apply_start_before_stop(target, restored, app_name, timeout_s=wait_s, read=current, extra=surge)
        if event.get("status") != "success":
            action += f" (but it is not RUNNING yet: {event.get('message', event.get('status'))})"
    else:
        from raylift.release.writer import write_serve_config

        write_serve_config(target, restored, read=current)
    log.warning("rollback: %s", action)
    return action


def restore_unproven(target: Target, state: DeploymentState, run_id: str, app_name: str) -> str:
    """Whatever failed after a deploy: if this run applied a config that was never recorded good and
    the app still runs this run's version, put the last good (or pre-deploy) app back.

    Idempotent: a step that already rolled back (a gate, a failed deploy) leaves nothing to do, and an
    app someone else changed since this run applied it is left alone (and said so), never reverted.
    """
    applied = state.applied(run_id)
    if applied is None:
        return f"nothing to roll back: run {run_id} applied no config for app {app_name!r}"
    if state.proven(run_id):
        return f"nothing to roll back: run {run_id}'s config for app {app_name!r} passed its gates"
    current = target.current_serve_config()
    now = app_by_name(current, app_name)
    back, _, source = what_this_run_replaced(state, run_id, app_name)
    if _same_app(now, back):
        return f"nothing to roll back: app {app_name!r} already runs the {source}"
    if now is None and back is None:
        return f"nothing to roll back: app {app_name!r} is not deployed, as before run {run_id}"
    try:  # restore_app checks, before any write, that the app still runs what this run applied
        return restore_app(target, state, run_id, app_name)
    except RollbackConflictError as exc:  # someone else changed it since: left as it is, the change named
        log.warning("rollback: app %r was changed by someone else since run %s applied it; left as it is",
                    app_name, run_id)
        return f"not rolled back: {exc}"


def _same_app(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool:
    """Equal, or the same code version with the same replica counts (however Serve echoes the config)."""
    from raylift.release.rollout import restarts_replicas

    if a == b:
        return True
    if a is None or b is None or restarts_replicas(a, b):
        return False

    def counts(app: dict[str, Any]) -> list[tuple[Any, ...]]:
        return sorted((str(d.get("name")), d.get("num_replicas"), repr(d.get("autoscaling_config")))
                      for d in app.get("deployments", []))

    return counts(a) == counts(b)



def undo_release(target: Target, state: DeploymentState, run_id: str, app_name: str) -> str:
    """The DAG's one rollback, whatever failed or was rejected: first undo what the release changed in the cluster
    itself (``Target.undo_cluster_change``: on ECS, the services back on the task-definition revisions they ran,
    and the Serve config the restarted head lost re-applied), then remove this run's canary (giving a lent replica
    back), then restore the app if this run's unproven config still serves it (a direct release, or a promotion
    that did not finish). Each part leaves alone what someone else changed since, and says so."""
    from raylift.release.blue_green import undo_blue_green
    from raylift.release.canary import CanaryPlan, without_canary
    from raylift.release.writer import write_serve_config

    blue_green = undo_blue_green(target, state, run_id)
    if blue_green is not None:  # the serving cluster was never written to: nothing else to undo
        log.warning("rollback: %s", blue_green)
        return blue_green
    done: list[str] = []
    undone = target.undo_cluster_change()
    if undone is not None:
        done.append(undone.message)
        if undone.reapply is not None:  # the head restarted with no Serve app: what it served before the release
            write_serve_config(target, undone.reapply, read=target.current_serve_config())
            done.append(f"re-applied the Serve config the head served before the release (apps "
                        f"{[a.get('name') for a in undone.reapply.get('applications', [])]})")
    raw = state.canary(run_id)
    if raw is not None and not state.proven(run_id):
        plan = CanaryPlan.from_dict(raw)
        current = target.current_serve_config()
        cleaned = without_canary(current, plan)
        serving_now = app_by_name(current, app_name)
        if plan.lent and serving_now is not None and app_by_name(cleaned, app_name) != serving_now:
            # the lent replica goes back, but a count someone set by hand since the canary began is theirs
            back, kept = keep_hand_scaling(app_by_name(cleaned, app_name) or {}, plan.serving, serving_now)
            if kept:
                cleaned = merge_app(cleaned, back, defaults=cleaned)
                done.append(f"kept app {app_name!r}'s replica counts set during the canary ({', '.join(kept)})")
        if cleaned != current:
            write_serve_config(target, cleaned, read=current)
            gave_back = plan.lent and app_by_name(cleaned, app_name) != app_by_name(current, app_name)
            done.append(f"removed the canary app {plan.canary['name']!r}"
                        + (f" and gave app {app_name!r} its lent replica back" if gave_back else "")
                        + " (no user request reached the canary)")
            # until Serve no longer lists it (DELETING while its replica drains): the release ends with the
            # canary gone and its capacity free for the next one (the undeploy's own wait and condition)
            # the fresh baseline app this release started, when it still ran (without_canary removed it)
            baseline = plan.baseline["name"] if plan.baseline and app_by_name(current, plan.baseline["name"]) else None
            if baseline:
                done.append(f"removed its fresh baseline app {baseline!r}")
            for app in [plan.canary["name"], *([baseline] if baseline else [])]:
                gone = target.undeploy_trigger(app_name=str(app), timeout_s=CANARY_GONE_TIMEOUT_S)
                event = gone.wait() if gone is not None else {"status": "success"}
                if event.get("status") != "success":
                    done.append(f"Serve still lists app {app!r} after {CANARY_GONE_TIMEOUT_S:.0f} s "
                                f"({event.get('message', event.get('status'))}); it is no longer in the config")
        else:
            done.append(f"the canary app {plan.canary['name']!r} was already gone")
    done.append(restore_unproven(target, state, run_id, app_name))
    log.warning("rollback: %s", "; ".join(done))
    return "; ".join(done)
