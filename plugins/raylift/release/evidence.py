"""What the release gate gathers for :func:`raylift.release.decide`, and what it keeps of it.

Why here and not in the gate step: which baseline a release is judged against (the canary's serving arm, a direct
release's anchor, or nothing: a first deploy, an unchanged app config, a new anchor asked for) is release logic, and
the approval step reads the same evidence back from the stored decision (:func:`evidence_from_record`). The step
reads its Params and XComs, calls :func:`gather`, and branches on the decision :func:`keep_decision` records.

The gate step's module re-exports from here and is imported at every DAG parse, so the judgement and the report
(``raylift.measure``, its numeric stack) are imported only when a gate runs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from raylift.errors import GateError, RayliftValueError
from raylift.release.decision import JUDGED_BESIDE, ON_INCONCLUSIVE, ReleaseDecision, ReleaseEvidence
from raylift.release.state import DeploymentState, run_file, run_key, stand_in_anchor
from raylift.serve.config import app_by_name, config_hash

if TYPE_CHECKING:
    from raylift.release.gates import GateViolation

log = logging.getLogger(__name__)

# What a direct release is compared with: the anchor's samples, or nothing (re-baseline after the machine or
# cluster changed under an unchanged app). In a canary release "none" restarts the anchor's chain.
REGRESSION_BASELINES = ("last_good", "none")


class Gathered(NamedTuple):
    """What the gate judged: the evidence, the candidate's results, the serving app's (a canary release's only),
    the gate violations, and whether the app config is the last good run's (a redeploy: nothing to judge)."""

    evidence: ReleaseEvidence
    result: dict[str, Any]
    baseline: dict[str, Any] | None
    violations: list[GateViolation]
    unchanged: bool


def checked(settings: dict[str, Any]) -> dict[str, Any]:
    """The gate's resolved Params, refused before anything is read when a choice is not one the gate knows."""
    baseline_choice = settings["regression_baseline"]
    if baseline_choice not in REGRESSION_BASELINES:
        raise RayliftValueError(
            f"regression_baseline {baseline_choice!r} is not one of {list(REGRESSION_BASELINES)}: 'last_good' "
            "judges this release against the anchor, 'none' starts a new anchor")
    on_inconclusive = settings["on_inconclusive"]
    if on_inconclusive not in ON_INCONCLUSIVE:
        raise RayliftValueError(f"on_inconclusive {on_inconclusive!r} is not one of {list(ON_INCONCLUSIVE)}")
    return settings


def same_app_config(good: dict[str, Any] | None, config: dict[str, Any] | None, app_name: str) -> bool:
    """Whether this run serves exactly the app config the last good run served (args, engine args, the
    content-addressed model folder and artifact, replicas): then there is no release to judge or undo."""
    if not good or not config or not good.get("config"):
        return False
    ours, theirs = app_by_name(config, app_name), app_by_name(good["config"], app_name)
    return ours is not None and theirs is not None and config_hash(ours) == config_hash(theirs)


def _relabelled(baseline: dict[str, Any] | None, result: Mapping[str, Any]) -> dict[str, Any] | None:
    """``baseline`` under the candidate's served name: the name is a label clients send, the requests are the
    benchmark profile's, so a renamed model is compared like any other release (canary and direct alike)."""
    if baseline is None:
        return None
    return {**baseline, "model": result.get("model")}


def gather(state: DeploymentState, run_id: str, deployed: Mapping[str, Any], settings: Mapping[str, Any],
           slos: Mapping[str, Any], *, app_name: str, skipped: str | None, serve_config: dict[str, Any] | None,
           asked_by: str) -> Gathered:
    """The evidence of run ``run_id`` (``settings``: :func:`checked`'s; ``skipped``: why the benchmark measured
    nothing; ``serve_config``: what the deploy wrote; ``asked_by``: who triggered the run, named when it asks for
    a new anchor). GateError when the benchmark left nothing to judge."""
    from raylift.release.gates import assess, merged_slos

    canary = deployed.get("release") in JUDGED_BESIDE  # judged beside the serving app (a canary, blue/green)
    result = state.store.read_json(run_file(run_id, "benchmark"))
    if result is None and skipped:
        # an app without an OpenAI API (the translator): its smoke test is the evidence; nothing to judge
        log.info("benchmark skipped (%s): the release is judged by its smoke test and SLOs only", skipped)
        result = {"levels": [], "overall": {"error_rate": 0.0}, "skipped": skipped}
    if result is None:
        raise GateError(f"run {run_id} left no benchmark results ({run_file(run_id, 'benchmark')}): "
                        "nothing to judge; the release is not promoted")
    anchor = state.anchor() if canary else stand_in_anchor(state.anchor(), state.last_good())
    # regression_baseline 'none', explicitly: the only way a new anchor starts outside a first deploy
    # (raylift.release.decide, rule 0), and the record names who asked
    new_anchor_by = asked_by if settings["regression_baseline"] == "none" else None
    # a direct release that changed the cluster under an unchanged app entry (ECS/EKS roll a new image or
    # rayClusterConfig in place with release: direct; the deploy step's ``cluster_change``) is a release like any
    # other: judged against the anchor, never waved through as a redeploy
    unchanged = (not canary and not deployed.get("cluster_change")
                 and same_app_config(state.last_good(), serve_config, app_name))
    links: tuple[float, ...] = ()
    baseline: dict[str, Any] | None
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
        result, merged_slos(slos), judge_against,
        max_regression=settings["max_regression"], confidence=settings["regression_confidence"],
    )
    judged = judge_against is not None
    placed = result.get("placement") or {}
    not_regression = [v for v in violations if v.kind != "regression"]
    evidence = ReleaseEvidence(
        first_deploy=first or unchanged,
        smoke_passed=True,  # the smoke test passed, or the gate step would not run
        slo_violations=tuple(v.message for v in not_regression),
        judgement=judgement.as_dict() if judged else None,
        anchor_links=links,
        new_anchor_by=None if (first or unchanged) else new_anchor_by,
        # a canary judged against a fresh replica of the anchor's config measures the change since the anchor
        baseline_runs=str(deployed.get("baseline_runs") or "serving") if canary and judged else "serving",
        on_inconclusive=settings["on_inconclusive"],
        # where Ray put the two arms while they were measured (raylift.serve.placement): a verdict an unlike
        # placement alone could give is refused (raylift.release, rule 6)
        placement_favours=placed.get("favoured") if canary and judged else None,
        placement=str(placed.get("described") or "") if canary and judged else "",
        max_cumulative_regression=settings["max_cumulative_regression"],
        # how far two arms of the same config differ on this stack (raylift.release.measured.noise_evidence)
        aa_spread=(result.get("noise") or {}).get("aa_spread") if canary and judged else None,
        aa_source=str((result.get("noise") or {}).get("source") or "") if canary and judged else "",
        aa_readings=len((result.get("noise") or {}).get("headlines") or ()) if canary and judged else 0,
    )
    return Gathered(evidence, result, baseline if canary else None, violations, unchanged)


def keep_decision(state: DeploymentState, run_id: str, gathered: Gathered, decision: ReleaseDecision,
                  deployed: Mapping[str, Any]) -> dict[str, Any]:
    """Record ``decision`` (the run's ``release.json``: what the approval step and the report read), log it and
    write the run's report; returns the record (the gate's ``decision`` XCom)."""
    from raylift.measure.judgement import format_judgement

    evidence, result, baseline, _, unchanged = gathered
    anchor = state.anchor()
    record = {**decision.as_dict(), "unchanged": unchanged, "baseline_app": deployed.get("baseline_app"),
              "baseline_note": deployed.get("baseline_note") or None,
              # an unclear pilot measured again (raylift.release.confirmation_requests): what it showed
              "pilot": (result or {}).get("pilot"),
              # how the arms were measured (interleaved or concurrent) and why (raylift.release.measured)
              "design": (result or {}).get("design"),
              "anchor_run_id": (anchor or {}).get("run_id"), "evidence": evidence_dict(evidence)}
    if unchanged:
        record["reasons"] = [*record["reasons"], "same app config as the last good run: no release to judge "
                             "(a redeploy); it does not move the anchor"]
        record["becomes_anchor"] = False
    state.store.write_json(run_file(run_id, "release"), record)
    if evidence.judgement:
        log.info("%s", format_judgement(evidence.judgement))
    elif unchanged:
        log.info("same app config as the last good run: no release to judge; SLOs and evidence only")
    write_report(state, run_id, result, baseline, evidence, record)
    log.info("release decision: %s (verdict %s; change %s, since the anchor %s)\n%s", decision.action,
             decision.verdict, _pct(decision.headline_change), _pct(decision.cumulative_change),
             "\n".join(f"- {r}" for r in record["reasons"]))
    return record


def write_report(state: DeploymentState, run_id: str, result: dict[str, Any], baseline: dict[str, Any] | None,
                 evidence: ReleaseEvidence, record: dict[str, Any]) -> None:
    """The run's report, with the comparison; a plotting failure never blocks the decision."""
    from raylift.measure.report import cost_peers, run_history, stored_results, write_run_report

    if result.get("skipped"):
        return  # no benchmark (an app without an OpenAI API): no report to write
    try:
        result = {**result, "judgement": evidence.judgement or {}}
        runs_prefix = run_key(run_id).rsplit("/", 1)[0]
        stored = stored_results(state.store, runs_prefix)
        comparison = {"baseline": baseline, "judgement": evidence.judgement, "release": record}
        files = write_run_report(state.store, run_key(run_id), result, history=run_history(stored, result),
                                 peers=cost_peers(stored, result, state.last_good()), comparison=comparison)
        log.info("benchmark report: %s", state.store.child_uri(files["html"]))
    except Exception:
        log.exception("benchmark report not written; the decision stands")


def approval_timeout_s(minutes: Any) -> float:
    """How long a held release waits for a person, in seconds (the gate also keeps the lease that long)."""
    from raylift.config import APPROVAL_TIMEOUT_MINUTES

    value = APPROVAL_TIMEOUT_MINUTES if minutes in (None, "") else float(minutes)
    if value <= 0:
        raise RayliftValueError(f"approval.timeout_minutes must be > 0, got {minutes!r}")
    return value * 60


def approval_setting(approval: Any, key: str) -> Any:
    """One key of the ``approval`` Param (``timeout_minutes``, ``default``), None when left out (its default
    applies); RayliftValueError naming the Param when it is not an object of those keys."""
    if approval in (None, "", "None"):
        return None
    if not isinstance(approval, dict) or not set(approval) <= {"timeout_minutes", "default"}:
        raise RayliftValueError(f"approval must be an object of timeout_minutes and default, got {approval!r}")
    return approval.get(key)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def evidence_dict(evidence: ReleaseEvidence) -> dict[str, Any]:
    """What the decision saw, without the judgement (stored beside it in the record)."""
    return {"first_deploy": evidence.first_deploy, "slo_violations": list(evidence.slo_violations),
            "anchor_links": list(evidence.anchor_links), "on_inconclusive": evidence.on_inconclusive,
            "max_cumulative_regression": evidence.max_cumulative_regression, "judgement": evidence.judgement,
            "new_anchor_by": evidence.new_anchor_by, "baseline_runs": evidence.baseline_runs,
            "placement_favours": evidence.placement_favours, "placement": evidence.placement,
            "aa_spread": evidence.aa_spread, "aa_source": evidence.aa_source, "aa_readings": evidence.aa_readings}


def evidence_from_record(record: Mapping[str, Any], *, approval: str | None = None) -> ReleaseEvidence:
    """The gate's evidence back from its stored decision (for the approval step's second call to decide)."""
    seen = record.get("evidence") or {}
    return ReleaseEvidence(
        first_deploy=bool(seen.get("first_deploy")), smoke_passed=True,
        slo_violations=tuple(seen.get("slo_violations") or ()), judgement=seen.get("judgement"),
        anchor_links=tuple(float(x) for x in seen.get("anchor_links") or ()),
        max_cumulative_regression=float(seen["max_cumulative_regression"]),
        # a stored decision is read back only when it held
        on_inconclusive=str(seen.get("on_inconclusive") or "hold"), approval=approval,
        new_anchor_by=seen.get("new_anchor_by"), baseline_runs=str(seen.get("baseline_runs") or "serving"),
        placement_favours=seen.get("placement_favours"), placement=str(seen.get("placement") or ""),
        aa_spread=seen.get("aa_spread"), aa_source=str(seen.get("aa_source") or ""),
        aa_readings=int(seen.get("aa_readings") or 0))
