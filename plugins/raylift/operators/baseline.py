"""The canary's fresh baseline arm: started once the canary runs, waited for a bounded time, optional to the release.

Why a second write after the canary is RUNNING, not one write with both: Ray may place the baseline's replica
first, and a canary without room would then wait its whole deploy timeout. Why bounded and optional: the fit
check counts what the apps declare, but Ray's scheduler decides what it can place (a vLLM engine's own actors
take CPUs no app declares); a baseline Ray cannot place is removed after :func:`baseline_wait_s` and the canary
is judged against the serving app, the record saying why (``raylift.release.canary.without_fresh_baseline``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from raylift.errors import DeployError
from raylift.release.canary import (
    CanaryPlan,
    uses_fresh_baseline,
    with_baseline,
    without_baseline,
    without_fresh_baseline,
)

# The baseline's wait: twice the canary's own start (same config shape, started on a cluster that just placed
# one replica), at least this long (a tiny model here: 20-60 s from the write to RUNNING), at most the deploy's.
BASELINE_MIN_WAIT_S = 120.0


def baseline_wait_s(canary_start_s: float | None, deploy_timeout_s: float) -> float:
    """How long the fresh baseline may take to be RUNNING: ``2 x`` the canary's start, within the bounds above."""
    wait = max(BASELINE_MIN_WAIT_S, 2.0 * float(canary_start_s or 0.0))
    return min(wait, float(deploy_timeout_s))


class FreshBaselineMixin:
    """For ``ServeDeployOperator``: the baseline arm's write, wait and fallback, after the canary is RUNNING."""

    if TYPE_CHECKING:  # provided by ServeDeployOperator, TargetOperator and BaseOperator
        app_name: Any
        timeout_s: float
        deferrable: bool
        task_id: str
        log: Any
        target_impl: Any

        @property
        def served(self) -> str: ...

        def state_for(self, app_name: str) -> Any: ...

        def defer(self, *, trigger: Any, method_name: str, kwargs: dict[str, Any] | None = None,
                  timeout: Any = None) -> NoReturn: ...

    def start_baseline_arm(self, context: Any, plan: CanaryPlan, out: dict[str, Any]) -> dict[str, Any]:
        """Write the plan's fresh baseline beside the RUNNING canary and wait for it (``baseline_complete``);
        without one, the serving app is the baseline arm and ``out`` says so."""
        if not uses_fresh_baseline(plan):
            return self._with_baseline_arm(out, plan)
        assert plan.baseline is not None
        from raylift.release.writer import write_serve_config

        context["ti"].xcom_push(key="canary_out", value=out)
        started = ((out.get("cold_start") or {}).get("deploy_steps_s") or {}).get("serve_to_running_s")
        wait_s = baseline_wait_s(started, self.timeout_s)
        context["ti"].xcom_push(key="baseline_wait_s", value=wait_s)
        try:
            current = self.target_impl.current_serve_config()
            write_serve_config(self.target_impl, with_baseline(current, plan), read=current)
        except DeployError as exc:  # refused before the PUT (a conflict, a busy lease): nothing was written
            return self._fall_back(context, plan, out, f"the fresh baseline replica was not started ({exc})")
        self.log.info("baseline arm: a fresh replica of the %s config as app %r at %s, judged beside the canary "
                      "(neither carries user traffic); waiting up to %.0f s for it to be RUNNING",
                      "anchor's" if plan.baseline_runs == "fresh-anchor" else "serving",
                      plan.baseline["name"], plan.baseline["route_prefix"], wait_s)
        trigger = self.target_impl.deploy_trigger(app_names=[plan.baseline["name"]], timeout_s=wait_s,
                                                  optional=True)
        if self.deferrable:
            from datetime import timedelta

            self.defer(trigger=trigger, method_name="baseline_complete", timeout=timedelta(seconds=wait_s + 60))
        return self.baseline_complete(context, trigger.wait())

    def baseline_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """The baseline's wait ended: RUNNING, it is the baseline arm; otherwise it goes, and the serving app is."""
        plan = CanaryPlan.from_dict(self.state_for(str(self.app_name)).canary(context["run_id"]) or {})
        out = dict(context["ti"].xcom_pull(task_ids=self.task_id, key="canary_out") or {})
        if event.get("status") == "success":
            self.log.info("baseline arm RUNNING: %s", event.get("apps"))
            return self._with_baseline_arm(out, plan)
        wait_s = context["ti"].xcom_pull(task_ids=self.task_id, key="baseline_wait_s")
        assert plan.baseline is not None
        why = (f"the fresh baseline app {plan.baseline['name']!r} was not RUNNING within {float(wait_s or 0):.0f} s "
               f"of the canary ({event.get('app_status') or event.get('status')}: {event.get('message', 'no message')}), "
               "so it was removed")
        self._remove_baseline(plan)
        return self._fall_back(context, plan, out, why)

    def _remove_baseline(self, plan: CanaryPlan) -> None:
        """Take the unplaced baseline off the cluster (under the lease); rollback and promote remove it too."""
        from raylift.release.writer import write_serve_config

        try:
            current = self.target_impl.current_serve_config()
            write_serve_config(self.target_impl, without_baseline(current, plan), read=current)
        except DeployError as exc:
            self.log.warning("the fresh baseline app was not removed now (%s); the rollback or promote step "
                             "removes it", exc)

    def _fall_back(self, context: Any, plan: CanaryPlan, out: dict[str, Any], why: str) -> dict[str, Any]:
        plan = without_fresh_baseline(plan, f"{why}: the serving app is the baseline arm")
        self.state_for(str(self.app_name)).save_canary(context["run_id"], plan.as_dict())
        self.log.warning("baseline arm: the serving app, under its live traffic (%s)", plan.baseline_note)
        return self._with_baseline_arm(out, plan)

    def _with_baseline_arm(self, out: dict[str, Any], plan: CanaryPlan) -> dict[str, Any]:
        """``out`` with where the baseline arm answers, what it runs, and why when it is the serving app."""
        from raylift.serve.config import app_url

        base = plan.baseline if uses_fresh_baseline(plan) and plan.baseline is not None else plan.serving
        return {**out,
                "baseline_endpoint": app_url(self.target_impl.endpoint_url(), base),
                "baseline_served_name": str((base.get("args") or {}).get("served_model_name") or self.served),
                "baseline_scale": plan.baseline_scale,
                "baseline_runs": plan.baseline_runs,
                "baseline_app": base["name"],
                "baseline_note": plan.baseline_note,
                "lent": plan.lent}
