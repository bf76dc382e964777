"""Carry out a "promote" decision: the candidate becomes the app, then it is recorded as last good.

The decision is the gate's (or, after a hold, the approval's); this step only does it. In a canary release it
removes the canary and rolls the app to the candidate's config in one Serve write, start-before-stop on the
capacity the canary gives back, and defers until the app is RUNNING; in a blue/green release the endpoint is switched
to the candidate's cluster and the old one retired (``raylift.release.blue_green``); in a direct release the app
already runs the candidate. Then the run is the app's last good one (the rollback target and the redeploy source), and the
anchor moves: to this run if its verdict was a pass, else the run's change joins the anchor's chain.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from raylift.config import DEFAULT_APP_NAME, DEPLOY_TIMEOUT_S, ROLLOUT_SURGE_REPLICAS
from raylift.errors import DeployError, GateError
from raylift.operators.base import TargetOperator


class ReleaseConflictError(DeployError):
    """The serving app changed while the canary was judged: promoting would overwrite someone else's change."""


class PromoteReleaseOperator(TargetOperator):
    """Promote the release the gate (or the approval) decided to promote.

    :param app_name: the Serve application released.
    :param deployed: the deploy task's XCom (release kind, the Serve config it wrote).
    :param decision: the gate's ``decision`` XCom.
    :param approval: the approval step's XCom: its decision when the gate held the release, else None (skipped).
    :param surge_replicas: the replicas the promotion's rollout starts beside the old ones (start-before-stop).
    :param timeout_s: how long to wait for the app to be RUNNING on the candidate (the ``deploy_timeout_s`` Param).
    :param deferrable: free the worker slot while Serve rolls out (None: Airflow's default)."""

    template_fields = (*TargetOperator.template_fields, "app_name", "deployed", "decision", "approval", "surge_replicas",
                       "timeout_s")

    def __init__(self, *, app_name: str = DEFAULT_APP_NAME, deployed: Any = None, decision: Any = None,
                 approval: Any = None,
                 surge_replicas: int | str = ROLLOUT_SURGE_REPLICAS, timeout_s: float | str = DEPLOY_TIMEOUT_S,
                 deferrable: bool | None = None, **kwargs: Any) -> None:
        from raylift.config import default_deferrable

        kwargs.setdefault("trigger_rule", "none_failed_min_one_success")  # after the gate, or after an approval
        super().__init__(**kwargs)
        self.app_name, self.deployed, self.surge_replicas = app_name, deployed, surge_replicas
        self.decision, self.approval = decision, approval
        # a template ("{{ params.deploy_timeout_s }}") until rendered: execute converts it (config.deploy_timeout_s)
        self.timeout_s = cast(float, timeout_s)
        self.deferrable = default_deferrable(deferrable)

    def _decision(self, context: Any) -> dict[str, Any]:
        decision = self.approval or self.decision  # a person's answer to a held release stands over the hold
        if not decision or decision.get("action") != "promote":
            raise GateError(f"promote: the release decision is {decision and decision.get('action')!r}, not promote; "
                            "nothing is promoted")
        return dict(decision)

    def execute(self, context: Any) -> Any:
        from raylift.config import deploy_timeout_s
        from raylift.release.canary import CanaryPlan, kept_replicas, promoted, release_apps
        from raylift.release.rollback import rollback_surge
        from raylift.release.rollout import restarts_replicas, with_native_surge
        from raylift.release.writer import write_serve_config
        from raylift.serve.config import app_by_name

        self.timeout_s = deploy_timeout_s(self.timeout_s)
        decision = self._decision(context)
        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        name, run_id = str(self.app_name), context["run_id"]
        if deployed.get("release") == "blue_green":  # the candidate's cluster already runs it: switch, retire
            from raylift.release.blue_green import blue_drain_trigger, promote_blue_green

            drain = blue_drain_trigger(self.target_impl, self.state_for(name), run_id, log=self.log)
            if drain is not None and self.deferrable:  # the old cluster's requests in flight: waited in the triggerer
                from datetime import timedelta

                self.keep_lease_while_deferred(drain.timeout_s)
                self.defer(trigger=drain, method_name="blue_drained", timeout=timedelta(seconds=drain.timeout_s + 60))
            promote_blue_green(self.target_impl, self.state_for(name), run_id, log=self.log)
            return self._record(context, deployed.get("serve_config"), decision)
        if deployed.get("release") != "canary":
            return self._record(context, deployed.get("serve_config"), decision)
        state = self.state_for(name)
        plan = CanaryPlan.from_dict(state.canary(run_id) or {})
        target = self.target_impl
        current = target.current_serve_config()
        now = app_by_name(current, name)
        applied = state.applied(run_id) or {}
        ours = app_by_name(applied.get("config") or {}, name)  # this run's last write
        if (now is not None and ours is not None and app_by_name(current, plan.canary["name"]) is None
                and not restarts_replicas(plan.candidate, now) and not restarts_replicas(plan.candidate, ours)):
            # a retry whose earlier try wrote the promotion and died: finish it (wait, then record), never
            # refuse this run's own write as someone else's change
            self.log.warning("an earlier try of run %s already promoted app %r: waiting for RUNNING", run_id, name)
            # its write went in after begin_apply's time: Serve's deploy of it counts, not only deploys from now
            # (seen: a retry more than a second after its first try waited its whole timeout on a RUNNING app)
            if applied.get("at"):
                target.resume_after_submit(datetime.fromisoformat(applied["at"]).timestamp())
            return self._wait(context, current)
        if now is None or restarts_replicas(plan.serving, now):
            raise ReleaseConflictError(
                f"app {name!r} {'was removed' if now is None else 'runs another version'} since this run started its "
                "canary (a hand change or another writer): not promoted, so that change is kept. The rollback step "
                "removes the canary.")
        # the room the canary and its fresh baseline give back (both go in the promote's one write)
        without = {**current, "applications": [a for a in current["applications"]
                                                if a.get("name") not in release_apps(plan)]}
        # a replica count someone else set on the serving app while the canary ran is theirs: kept
        candidate, kept = kept_replicas(plan.candidate, plan.serving, now)
        if kept:
            self.log.warning("promote: app %r was scaled while the canary ran (%s): the candidate keeps it",
                             name, "; ".join(kept))
        surge = rollback_surge(target, candidate, without, int(self.surge_replicas))
        config = promoted(current, plan, with_native_surge(candidate, surge))
        # keeps the pre-deploy snapshot (rollback's target) and this run's surge and deploy_timeout_s (its wait)
        state.begin_apply(run_id, current, config, surge=surge, timeout_s=self.timeout_s)
        write_serve_config(target, config, read=current)
        self.log.info("promote: canary %r removed and app %r rolling to the candidate, %s; waiting for RUNNING",
                      plan.canary["name"], name,
                      f"start-before-stop with {surge} surge replica(s)" if surge else "stop-before-start (no room)")
        return self._wait(context, config)

    def _wait(self, context: Any, config: dict[str, Any]) -> Any:
        """Defer (or wait in the worker) until the app runs ``config``'s version, then record the promotion."""
        context["ti"].xcom_push(key="serve_config", value=config)
        trigger = self.target_impl.deploy_trigger(app_names=[str(self.app_name)], timeout_s=self.timeout_s)
        if self.deferrable:
            from datetime import timedelta

            self.keep_lease_while_deferred(self.timeout_s)
            self.defer(trigger=trigger, method_name="execute_complete",
                       timeout=timedelta(seconds=self.timeout_s + 60))
        return self.execute_complete(context, trigger.wait())

    def blue_drained(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """After the deferred drain wait of a blue/green release: retire the old cluster (or fail, it still running)."""
        from raylift.release.blue_green import promote_blue_green

        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        promote_blue_green(self.target_impl, self.state_for(str(self.app_name)), context["run_id"], drained=event,
                           log=self.log)
        return self._record(context, deployed.get("serve_config"), self._decision(context))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "success":
            waited = (f" The wait was deploy_timeout_s = {self.timeout_s} s: raise that Param where a replica takes "
                      "longer to start." if event.get("status") == "timeout" else "")
            raise DeployError(
                f"promote: app {self.app_name!r} did not become RUNNING on the candidate "
                f"({event.get('app_status') or event.get('status')}): {event.get('message', 'unknown')}. "
                f"The rollback step restores what served before this run.{waited}")
        config = context["ti"].xcom_pull(task_ids=self.task_id, key="serve_config")
        return self._record(context, config, self._decision(context))

    def _record(self, context: Any, config: dict[str, Any] | None, decision: dict[str, Any]) -> dict[str, Any]:
        """The run is the app's last good one; the anchor moves (``raylift.release.next_anchor_links``)."""
        from raylift.release.decision import ReleaseDecision, next_anchor_links
        from raylift.release.state import run_file, stand_in_anchor
        from raylift.serve.config import app_by_name

        name, run_id = str(self.app_name), context["run_id"]
        state = self.state_for(name)
        result = state.store.read_json(run_file(run_id, "benchmark"))
        previous = state.last_good()
        if config:
            state.record_good(run_id, config, benchmark=result)
        anchor = stand_in_anchor(state.anchor(), previous)  # the chain starts where the gate judged from
        links = tuple(float(x) for x in (anchor or {}).get("links", []))
        final = ReleaseDecision(
            action=decision["action"], verdict=decision["verdict"], reasons=tuple(decision.get("reasons") or ()),
            headline_change=decision.get("headline_change"), cumulative_change=decision.get("cumulative_change"),
            becomes_anchor=bool(decision.get("becomes_anchor")), new_anchor_by=decision.get("new_anchor_by"),
            against_anchor=bool(decision.get("against_anchor")))
        new_links = next_anchor_links(links, final)
        if final.becomes_anchor:
            # its own app entry too: the next canary's fresh baseline arm runs it (the change since the anchor)
            state.write_anchor(run_id, [], result, app=app_by_name(config or {}, name))
            moved = f"run {run_id} is the new anchor (its verdict was {final.verdict})" + (
                f"; regression_baseline 'none' asked by {decision['new_anchor_by']}"
                if decision.get("new_anchor_by") else "")
        elif anchor is None:  # nothing raylift released passed before (the app was deployed by hand)
            moved = f"no anchor yet (verdict {final.verdict}, not a pass): the next release that passes becomes it"
        else:
            state.write_anchor(anchor.get("run_id"), list(new_links), anchor.get("benchmark"), app=anchor.get("app"))
            moved = (f"the anchor stays run {anchor.get('run_id')} (verdict {final.verdict}, not a pass); "
                     f"changes since it: {', '.join(f'{x:+.1%}' for x in new_links) or 'none'}")
        self.log.info("promoted: app %r serves run %s's config; %s", name, run_id, moved)
        return {"promoted": True, "verdict": final.verdict, "anchor": moved,
                "cumulative_change": final.cumulative_change}
