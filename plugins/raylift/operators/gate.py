"""The release gate: judge the measured candidate, let ``raylift.release`` decide, and branch on its action.

One visible step between the benchmark and what follows it. It reads what the benchmark stored (the candidate
and, in a canary release, the serving app measured beside it; in a direct one, the anchor's samples from
another moment), checks the SLOs and evidence, runs the Hodges–Lehmann / Mann-Whitney judgement, and hands
the verdicts to :func:`raylift.release.decide`:

- promote → the ``promote`` step;
- hold → the ``approve_release`` step (Airflow's human-in-the-loop approval);
- roll back → this task fails with the reasons, and the ``rollback`` step (``one_failed``) undoes the release.

It also writes the run's report, which shows the comparison, the verdict table and the drift since the anchor.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.branch import BaseBranchOperator

from raylift.config import (
    DEFAULT_APP_NAME,
)
from raylift.errors import GateError, RayliftValueError
from raylift.operators.base import TargetOperator

# What a direct release is compared with: the anchor's samples, or nothing (re-baseline after the machine or
# cluster changed under an unchanged app). In a canary release "none" restarts the anchor's chain.
REGRESSION_BASELINES = ("last_good", "none")
PROMOTE_TASK, APPROVE_TASK = "promote", "approve_release"


class ReleaseGateOperator(TargetOperator, BaseBranchOperator):
    """Judge the benchmark, decide (``raylift.release.decide``), and follow the decision: ``promote``,
    ``approve_release`` (hold), or fail so that ``rollback`` runs. The decision is this task's XCom.

    :param app_name: the Serve application released.
    :param deployed: the deploy task's XCom (release kind, endpoints).
    :param slos: absolute limits (``raylift.release.gates``).
    :param max_regression: the tolerance of each metric's change against the baseline (a fraction).
    :param regression_confidence: confidence of each metric's interval.
    :param on_inconclusive: ``hold`` (ask for approval), ``pass`` (promote, not as an anchor) or ``fail``.
    :param max_cumulative_regression: the largest slowdown allowed since the anchor, releases chained.
    :param regression_baseline: ``last_good`` (judge against the anchor's chain) or ``none`` (start a new one).
    :param approval_timeout_minutes: how long a hold waits for a person (also how long the lease is kept)."""

    template_fields = (
        *TargetOperator.template_fields,
        "app_name", "deployed", "slos", "max_regression", "regression_confidence", "on_inconclusive",
        "max_cumulative_regression", "regression_baseline", "approval_timeout_minutes",
    )

    def __init__(
        self,
        *,
        app_name: str = DEFAULT_APP_NAME,
        deployed: Any = None,
        slos: dict[str, Any] | None = None,
        max_regression: float | str | None = None,
        regression_confidence: float | str | None = None,
        on_inconclusive: str | None = None,
        max_cumulative_regression: float | str | None = None,
        regression_baseline: str | None = None,
        approval_timeout_minutes: float | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.app_name, self.deployed, self.slos = app_name, deployed, slos or {}
        self.max_regression, self.regression_confidence = max_regression, regression_confidence
        self.on_inconclusive = on_inconclusive
        self.max_cumulative_regression = max_cumulative_regression
        self.regression_baseline = regression_baseline
        self.approval_timeout_minutes = approval_timeout_minutes
        self._hold = False

    def settings(self) -> dict[str, Any]:
        """The gate's Params, each resolved: what the DAG passed, else its default (raylift.config.PARAM_DEFAULTS)."""
        from raylift.config import param_default
        from raylift.operators.benchmark import _number

        on_inconclusive = str(self.on_inconclusive or param_default("on_inconclusive"))
        numbers = ("max_regression", "regression_confidence", "max_cumulative_regression")
        return {
            "on_inconclusive": on_inconclusive,
            "regression_baseline": str(self.regression_baseline or param_default("regression_baseline")),
            **{name: _number(getattr(self, name), param_default(name)) for name in numbers},
        }

    def evidence(self, context: Any) -> tuple[Any, dict[str, Any], dict[str, Any] | None, list[Any], bool]:
        """(the ReleaseEvidence, the candidate's results, the baseline's, the gate violations, unchanged)."""
        from raylift.operators.benchmark import same_app_config
        from raylift.release.decision import ON_INCONCLUSIVE, ReleaseEvidence
        from raylift.release.gates import assess, merged_slos
        from raylift.release.state import run_file, stand_in_anchor

        settings = self.settings()
        baseline_choice = settings["regression_baseline"]
        if baseline_choice not in REGRESSION_BASELINES:
            raise RayliftValueError(
                f"regression_baseline {baseline_choice!r} is not one of {list(REGRESSION_BASELINES)}: 'last_good' "
                "judges this release against the anchor, 'none' starts a new anchor")
        on_inconclusive = settings["on_inconclusive"]
        if on_inconclusive not in ON_INCONCLUSIVE:
            raise RayliftValueError(f"on_inconclusive {on_inconclusive!r} is not one of {list(ON_INCONCLUSIVE)}")
        state = self.state_for(str(self.app_name))
        run_id = context["run_id"]
        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        canary = deployed.get("release") == "canary"
        result = state.store.read_json(run_file(run_id, "benchmark"))
        skipped = (context["ti"].xcom_pull(task_ids="benchmark") or {}).get("skipped")
        if result is None and skipped:
            # an app without an OpenAI API (the translator): its smoke test is the evidence; nothing to judge
            self.log.info("benchmark skipped (%s): the release is judged by its smoke test and SLOs only", skipped)
            result = {"levels": [], "overall": {"error_rate": 0.0}, "skipped": skipped}
        if result is None:
            raise GateError(f"run {run_id} left no benchmark results ({run_file(run_id, 'benchmark')}): "
                            "nothing to judge; the release is not promoted")
        anchor = state.anchor() if canary else stand_in_anchor(state.anchor(), state.last_good())
        # regression_baseline 'none', explicitly: the only way a new anchor starts outside a first deploy
        # (raylift.release.decide, rule 0), and the record names who asked
        new_anchor_by = asked_by(context) if baseline_choice == "none" else None
        config = context["ti"].xcom_pull(task_ids="deploy", key="serve_config")
        unchanged = not canary and same_app_config(state.last_good(), config, str(self.app_name))
        links: tuple[float, ...] = ()
        if canary and skipped:
            baseline = None  # nothing was measured beside the serving app: smoke test and SLOs only
        elif canary:
            baseline = state.store.read_json(run_file(run_id, "baseline"))
            if baseline is None:
                raise GateError(f"canary release {run_id}: the serving app's results (baseline.json) are missing")
            baseline = _relabelled(baseline, result)
            links = () if new_anchor_by else tuple(float(x) for x in (anchor or {}).get("links", []))
        elif new_anchor_by:
            baseline = None  # a new anchor asked for: this direct release is held to its SLOs only
        else:
            # judged against the anchor's own samples (the change is already cumulative); always when the anchor
            # has any: another served name or benchmark profile starts no new anchor by itself
            # (an anchor that kept no samples is judged as such: nothing comparable, not a pass by absence)
            baseline = _relabelled((anchor or {}).get("benchmark") or {"levels": []}, result)
        first = (not canary and anchor is None and not unchanged) or bool(skipped)
        judge_against = None if (first or unchanged or baseline is None) else baseline
        judgement, violations = assess(
            result, merged_slos(self.slos if isinstance(self.slos, dict) else {}), judge_against,
            max_regression=settings["max_regression"], confidence=settings["regression_confidence"],
        )
        judged = judge_against is not None
        placed = result.get("placement") or {}
        not_regression = [v for v in violations if v.kind != "regression"]
        evidence = ReleaseEvidence(
            first_deploy=first or unchanged,
            smoke_passed=True,  # the smoke test passed, or this step would not run
            slo_violations=tuple(v.message for v in not_regression),
            judgement=judgement.as_dict() if judged else None,
            anchor_links=links,
            new_anchor_by=None if (first or unchanged) else new_anchor_by,
            # a canary judged against a fresh replica of the anchor's config measures the change since the anchor
            baseline_runs=str(deployed.get("baseline_runs") or "serving") if canary and judged else "serving",
            on_inconclusive=on_inconclusive,
            # where Ray put the two arms while they were measured (raylift.serve.placement): a verdict an unlike
            # placement alone could give is refused (raylift.release, rule 6)
            placement_favours=placed.get("favoured") if canary and judged else None,
            placement=str(placed.get("described") or "") if canary and judged else "",
            max_cumulative_regression=settings["max_cumulative_regression"],
        )
        return evidence, result, baseline if canary else None, violations, unchanged

    def choose_branch(self, context: Any) -> str:
        from raylift.measure.judgement import format_judgement
        from raylift.release.decision import HOLD, PROMOTE, decide
        from raylift.release.state import run_file

        evidence, result, baseline, violations, unchanged = self.evidence(context)
        decision = decide(evidence)
        state = self.state_for(str(self.app_name))
        anchor = state.anchor()
        deployed = self.deployed if isinstance(self.deployed, dict) else {}
        record = {**decision.as_dict(), "unchanged": unchanged, "baseline_app": deployed.get("baseline_app"),
                  "baseline_note": deployed.get("baseline_note") or None,
                  # an unclear pilot measured again (raylift.release.confirmation_requests): what it showed
                  "pilot": (result or {}).get("pilot"),
                  "anchor_run_id": (anchor or {}).get("run_id"), "evidence": _evidence_dict(evidence)}
        if unchanged:
            record["reasons"] = [*record["reasons"], "same app config as the last good run: no release to judge "
                                 "(a redeploy); it does not move the anchor"]
            record["becomes_anchor"] = False
        run_id = context["run_id"]
        state.store.write_json(run_file(run_id, "release"), record)
        if evidence.judgement:
            self.log.info("%s", format_judgement(evidence.judgement))
        elif unchanged:
            self.log.info("same app config as the last good run: no release to judge; SLOs and evidence only")
        self._report(state, run_id, result, baseline, evidence, record)
        self.log.info("release decision: %s (verdict %s; change %s, since the anchor %s)\n%s", decision.action,
                      decision.verdict, _pct(decision.headline_change), _pct(decision.cumulative_change),
                      "\n".join(f"- {r}" for r in record["reasons"]))
        context["ti"].xcom_push(key="decision", value=record)
        if decision.action == PROMOTE:
            return PROMOTE_TASK
        if decision.action == HOLD:
            self._hold = True
            return APPROVE_TASK
        undo = ("the rollback step removes the canary (the serving app was never changed)"
                if deployed.get("release") == "canary" else "the rollback step restores what served before this run")
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
        ttl = approval_timeout_s(self.approval_timeout_minutes) + RELEASE_LEASE_TTL_S
        manager.renew(Lease(current.token, current.holder, current.expires_at), ttl)
        self.log.info("the cluster's lease is kept for %.0f s: the approval's timeout plus the lease's TTL", ttl)

    def _report(self, state: Any, run_id: str, result: dict[str, Any], baseline: dict[str, Any] | None,
                evidence: Any, record: dict[str, Any]) -> None:
        """The run's report, with the comparison; a plotting failure never blocks the decision."""
        from raylift.measure.report import cost_peers, run_history, stored_results, write_run_report
        from raylift.release.state import run_key

        if result.get("skipped"):
            return  # no benchmark (an app without an OpenAI API): no report to write
        try:
            result = {**result, "judgement": evidence.judgement or {}}
            runs_prefix = run_key(run_id).rsplit("/", 1)[0]
            stored = stored_results(state.store, runs_prefix)
            comparison = {"baseline": baseline, "judgement": evidence.judgement, "release": record}
            files = write_run_report(state.store, run_key(run_id), result, history=run_history(stored, result),
                                     peers=cost_peers(stored, result, state.last_good()), comparison=comparison)
            self.log.info("benchmark report: %s", state.store.child_uri(files["html"]))
        except Exception:
            self.log.exception("benchmark report not written; the decision stands")


def asked_by(context: Any) -> str:
    """Who triggered the run, as Airflow gives it: the triggering user's name and the run id."""
    dag_run = context.get("dag_run")
    user = getattr(dag_run, "triggering_user_name", None) if dag_run is not None else None
    who = f"user {user!r}" if user else "no named user (a schedule, an asset event or a backfill)"
    return f"{who}, run {context['run_id']}"


def _relabelled(baseline: dict[str, Any] | None, result: dict[str, Any]) -> dict[str, Any] | None:
    """``baseline`` under the candidate's served name: the name is a label clients send, the requests are the
    benchmark profile's, so a renamed model is compared like any other release (canary and direct alike)."""
    if baseline is None:
        return None
    return {**baseline, "model": result.get("model")}


def approval_timeout_s(minutes: Any) -> float:
    from raylift.config import APPROVAL_TIMEOUT_MINUTES

    value = APPROVAL_TIMEOUT_MINUTES if minutes in (None, "") else float(minutes)
    if value <= 0:
        raise RayliftValueError(f"approval_timeout_minutes must be > 0, got {minutes!r}")
    return value * 60


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _evidence_dict(evidence: Any) -> dict[str, Any]:
    """What the decision saw, without the judgement (stored beside it in the record)."""
    return {"first_deploy": evidence.first_deploy, "slo_violations": list(evidence.slo_violations),
            "anchor_links": list(evidence.anchor_links), "on_inconclusive": evidence.on_inconclusive,
            "max_cumulative_regression": evidence.max_cumulative_regression, "judgement": evidence.judgement,
            "new_anchor_by": evidence.new_anchor_by, "baseline_runs": evidence.baseline_runs,
            "placement_favours": evidence.placement_favours, "placement": evidence.placement}


def evidence_from_record(record: dict[str, Any], *, approval: str | None = None) -> Any:
    """The gate's evidence back from its stored decision (for the approval step's second call to decide)."""
    from raylift.release.decision import ReleaseEvidence

    seen = record.get("evidence") or {}
    return ReleaseEvidence(
        first_deploy=bool(seen.get("first_deploy")), smoke_passed=True,
        slo_violations=tuple(seen.get("slo_violations") or ()), judgement=seen.get("judgement"),
        anchor_links=tuple(float(x) for x in seen.get("anchor_links") or ()),
        max_cumulative_regression=float(seen["max_cumulative_regression"]),
        # a stored decision is read back only when it held
        on_inconclusive=str(seen.get("on_inconclusive") or "hold"), approval=approval,
        new_anchor_by=seen.get("new_anchor_by"), baseline_runs=str(seen.get("baseline_runs") or "serving"),
        placement_favours=seen.get("placement_favours"), placement=str(seen.get("placement") or ""))
