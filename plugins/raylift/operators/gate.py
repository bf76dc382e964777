"""The release gate: judge the measured candidate, let ``raylift.release`` decide, and branch on its action.

One visible step between the benchmark and what follows it. It reads what the benchmark stored (the candidate
and, in a canary release, the serving app measured beside it; in a direct one, the anchor's samples from
another moment), checks the SLOs and evidence, runs the Hodges–Lehmann / Mann-Whitney judgement, and hands
the verdicts to :func:`raylift.release.decide`:

- promote → the ``promote`` step;
- hold → the ``approve_release`` step (Airflow's human-in-the-loop approval);
- roll back → this task fails with the reasons, and the ``rollback`` step (``one_failed``) undoes the release.

It also writes the run's report, which shows the comparison, the verdict table and the drift since the anchor.
What it gathers and records is :mod:`raylift.release.evidence`'s; this step reads its Params and XComs and branches.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.branch import BaseBranchOperator

from raylift.config import DEFAULT_APP_NAME
from raylift.errors import GateError
from raylift.operators.base import TargetOperator

# what the approval step imports from here (its evidence and timeout are the gate's, kept in raylift.release)
from raylift.release.evidence import (
    REGRESSION_BASELINES,
    Gathered,
    approval_setting,
    approval_timeout_s,
    evidence_from_record,
)

__all__ = ["APPROVE_TASK", "PROMOTE_TASK", "REGRESSION_BASELINES", "ReleaseGateOperator", "approval_timeout_s",
           "asked_by", "evidence_from_record"]

PROMOTE_TASK, APPROVE_TASK = "promote", "approve_release"


class ReleaseGateOperator(TargetOperator, BaseBranchOperator):
    """Judge the benchmark, decide (``raylift.release.decide``), and follow the decision: ``promote``,
    ``approve_release`` (hold), or fail so that ``rollback`` runs. The decision is this task's XCom.

    :param app_name: the Serve application released.
    :param deployed: the deploy task's XCom (release kind, endpoints, the Serve config it wrote).
    :param benchmark: the benchmark task's XCom (``skipped`` for an app with no OpenAI API).
    :param slos: absolute limits (``raylift.release.gates``).
    :param max_regression: the tolerance of each metric's change against the baseline (a fraction).
    :param regression_confidence: confidence of each metric's interval.
    :param on_inconclusive: ``hold`` (ask for approval), ``pass`` (promote, not as an anchor) or ``fail``.
    :param max_cumulative_regression: the largest slowdown allowed since the anchor, releases chained.
    :param regression_baseline: ``last_good`` (judge against the anchor's chain) or ``none`` (start a new one).
    :param approval: the ``approval`` Param: ``timeout_minutes``, how long a hold waits for a person (also how long
        the lease is kept)."""

    template_fields = (
        *TargetOperator.template_fields,
        "app_name", "deployed", "benchmark", "slos", "max_regression", "regression_confidence", "on_inconclusive",
        "max_cumulative_regression", "regression_baseline", "approval",
    )

    def __init__(
        self,
        *,
        app_name: str = DEFAULT_APP_NAME,
        deployed: Any = None,
        benchmark: Any = None,
        slos: dict[str, Any] | None = None,
        max_regression: float | str | None = None,
        regression_confidence: float | str | None = None,
        on_inconclusive: str | None = None,
        max_cumulative_regression: float | str | None = None,
        regression_baseline: str | None = None,
        approval: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.app_name, self.deployed, self.slos = app_name, deployed, slos or {}
        self.benchmark = benchmark
        self.max_regression, self.regression_confidence = max_regression, regression_confidence
        self.on_inconclusive = on_inconclusive
        self.max_cumulative_regression = max_cumulative_regression
        self.regression_baseline = regression_baseline
        self.approval = approval
        self._hold = False

    def settings(self) -> dict[str, Any]:
        """The gate's Params, each resolved: what the DAG passed, else its default (raylift.config.PARAM_DEFAULTS)."""
        from raylift.config import param_default
        from raylift.measure.params import number

        on_inconclusive = str(self.on_inconclusive or param_default("on_inconclusive"))
        numbers = ("max_regression", "regression_confidence", "max_cumulative_regression")
        return {
            "on_inconclusive": on_inconclusive,
            "regression_baseline": str(self.regression_baseline or param_default("regression_baseline")),
            **{name: number(getattr(self, name), param_default(name)) for name in numbers},
        }

    def evidence(self, context: Any) -> Gathered:
        """What the gate judges (``raylift.release.evidence.Gathered``): this run's Params, store and upstream XComs."""
        from raylift.release.evidence import checked, gather

        settings = checked(self.settings())
        state = self.state_for(str(self.app_name))
        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        skipped = (self.benchmark if isinstance(self.benchmark, dict) else {}).get("skipped")
        return gather(state, context["run_id"], deployed, settings, self.slos if isinstance(self.slos, dict) else {},
                      app_name=str(self.app_name), skipped=skipped, serve_config=deployed.get("serve_config"),
                      asked_by=asked_by(context))

    def choose_branch(self, context: Any) -> str:
        from raylift.release.decision import HOLD, PROMOTE, decide
        from raylift.release.evidence import keep_decision

        gathered = self.evidence(context)
        decision = decide(gathered.evidence)
        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        record = keep_decision(self.state_for(str(self.app_name)), context["run_id"], gathered, decision, deployed)
        context["ti"].xcom_push(key="decision", value=record)
        if decision.action == PROMOTE:
            return PROMOTE_TASK
        if decision.action == HOLD:
            self._hold = True
            return APPROVE_TASK
        undo = {"canary": "the rollback step removes the canary (the serving app was never changed)",
                "blue_green": "the rollback step stops the candidate's cluster (the serving one was never changed)",
                }.get(str(deployed.get("release")), "the rollback step restores what served before this run")
        raise GateError(f"Release gate failed ({decision.verdict}): " + "; ".join(record["reasons"]) + f". {undo}.")

    def post_execute(self, context: Any, result: Any = None) -> None:
        super().post_execute(context, result)
        if self._hold:  # the lease must outlive the approval: nobody renews it while a person decides
            self._keep_lease_for_approval(context)

    def _keep_lease_for_approval(self, context: Any) -> None:
        from raylift.config import RELEASE_LEASE_TTL_S
        from raylift.lease import Lease
        from raylift.operators.base import release_holder
        from raylift.release.writer import cluster_lease

        manager = cluster_lease(self.target_impl)
        current = manager.current()
        if current is None or current.holder != release_holder(context):
            return  # the next step finds out and fails before it writes
        ttl = approval_timeout_s(approval_setting(self.approval, "timeout_minutes")) + RELEASE_LEASE_TTL_S
        manager.renew(Lease(current.token, current.holder, current.expires_at), ttl)
        self.log.info("the cluster's lease is kept for %.0f s: the approval's timeout plus the lease's TTL", ttl)


def asked_by(context: Any) -> str:
    """Who triggered the run, as Airflow gives it: the triggering user's name and the run id."""
    dag_run = context.get("dag_run")
    user = getattr(dag_run, "triggering_user_name", None) if dag_run is not None else None
    who = f"user {user!r}" if user else "no named user (a schedule, an asset event or a backfill)"
    return f"{who}, run {context['run_id']}"
