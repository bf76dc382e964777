"""A held release waits for a person: Airflow's own approval step (Required Actions in the UI, or the REST API).

The gate holds an inconclusive release when ``on_inconclusive`` is ``hold``. This is the standard provider's
``ApprovalOperator`` with the release's evidence as its body; the answer (or, after the ``approval`` Param's
``timeout_minutes``, its ``default``) goes back through :func:`raylift.release.decide`, which stays the one owner of the
decision: approve → the ``promote`` step; reject → this task fails and the ``rollback`` step removes the canary.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator

from raylift.errors import GateError, RayliftValueError
from raylift.operators.base import TargetOperator

APPROVAL_DEFAULTS = ("approve", "reject")


class ReleaseApprovalOperator(TargetOperator, ApprovalOperator):
    """Ask a person to approve or reject a held release; the decision is this task's XCom, and replaces the gate's
    in the run's ``release.json`` (what the run record keeps).

    Timeout and default answer come from the run's ``approval`` Param (``timeout_minutes``, ``default``), read when
    the task starts.

    :param decision: the gate's ``decision`` XCom (the held release's evidence)."""

    template_fields = (*TargetOperator.template_fields, *ApprovalOperator.template_fields, "decision")

    def __init__(self, *, decision: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("subject", "Promote the held release?")
        kwargs.setdefault("trigger_rule", "all_success")
        super().__init__(**kwargs)
        self.decision = decision

    def execute(self, context: Any) -> Any:
        from raylift.config import APPROVAL_DEFAULT
        from raylift.measure.judgement import format_judgement
        from raylift.release.evidence import approval_setting, approval_timeout_s

        params = context.get("params") or {}
        approval = params.get("approval")
        default = str(approval_setting(approval, "default") or APPROVAL_DEFAULT)
        if default not in APPROVAL_DEFAULTS:
            raise RayliftValueError(f"approval.default {default!r} is not one of {list(APPROVAL_DEFAULTS)}")
        self.response_timeout = timedelta(seconds=approval_timeout_s(approval_setting(approval, "timeout_minutes")))
        self.defaults = [self.APPROVE if default == "approve" else self.REJECT]
        decision = self.decision if isinstance(self.decision, dict) else {}
        judgement = (decision.get("evidence") or {}).get("judgement")
        self.subject = (f"Release {context['run_id']} of app {params.get('app_name')!r} is {decision.get('verdict')}: "
                        "promote it?")
        self.body = "\n".join([
            "The gate could not tell whether the candidate is slower than what serves.",
            *[f"- {r}" for r in decision.get("reasons", [])],
            "",
            "```", format_judgement(judgement) if judgement else "(no judgement)", "```",
            f"No answer in {self.response_timeout}: **{default}**.",
        ])
        return super().execute(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        from raylift.operators.gate import evidence_from_record
        from raylift.release.decision import PROMOTE, decide

        answer = HITLOperator.execute_complete(self, context=context, event=event)  # validated, summary kept
        chosen = answer["chosen_options"][0]
        from raylift.release.state import run_file

        held = self.decision if isinstance(self.decision, dict) else {}
        evidence = evidence_from_record(held, approval="approve" if chosen == self.APPROVE else "reject")
        decision = decide(evidence)
        user = answer.get("responded_by_user")  # Airflow's HITLUser ({"id", "name"}); None: the timeout's default
        by = (user.get("name") or user.get("id")) if isinstance(user, dict) else (user or "the timeout's default")
        record = {**held, **decision.as_dict(), "approval": {"answer": chosen, "by": str(by),
                                                           "at": str(answer.get("responded_at"))}}
        app = str((context.get("params") or {}).get("app_name") or "")
        self.state_for(app).store.write_json(run_file(context["run_id"], "release"), record)  # the run record's
        self.log.info("approval: %s by %s -> %s", chosen, by, decision.action)
        if decision.action != PROMOTE:
            raise GateError(f"Release rejected ({chosen} by {by}): " + "; ".join(decision.reasons)
                            + ". The rollback step removes the canary.")
        return record
