"""What a release measures, and what the benchmark step leaves for the gate.

Why in the release package: which measurement is the evidence is a release rule. A canary's first side-by-side
measurement is a pilot, measured again at more requests when its change is unclear
(:func:`raylift.release.decision.confirmation_requests`), and where Ray placed the two arms decides which verdicts
the gate may give (:mod:`raylift.serve.placement`, rule 6). The benchmark step resolves its Params, calls
:func:`measure`, and hands the results to :func:`keep_results`.

How the two arms are measured is chosen here, in one place (:func:`measurement_design`), from where they run:
arms that share a host or a Ray node are measured **interleaved** (each alone, a fresh random order each round:
``raylift.measure.runner.INTERLEAVED``); arms with devices or hosts of their own **concurrently**. On the real
stack (issue 56) two identical vLLM servers on one 2-core host read 1.29 measured at once beside a live client,
and a replica's node neighbours moved its speed by 26-65 %: what arms measured at once on shared cores see is
mostly each other. The choice and why are kept with the result (``design``) and so with the verdict.

What the gate knows of its noise (:func:`noise_evidence`): the app's A/A log. Each release adds what it measured
of two arms of one config: measured interleaved, an **A/A inside the release** (:data:`AA_ARM`: the baseline's
replica measured a second time, in its own turn of the same random orders, judged against its first measurement);
a canary of the anchor's own config, its candidate against its baseline. The spread of the log's last
:data:`AA_WINDOW` headlines, this release's included (:func:`raylift.release.decision.aa_spread`), goes with the
result (``noise``), and the gate refuses verdicts the noise alone could give
(:func:`raylift.release.decision.noise_refusal`). The in-release A/A measures one replica twice, so it holds the
machine's noise over the rounds and the arms' order, not the difference between two fresh replicas of one config
(0.017 in log e2e on session 31's releases, ``bench/gate_calibration.py``: small beside the rest).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from raylift.config import DEFAULT_MAX_REGRESSION, DEFAULT_REGRESSION_CONFIDENCE
from raylift.measure.cost import DEFAULT_REGION, format_cost, run_cost
from raylift.measure.llmperf_summary import llmperf_files
from raylift.measure.runner import CONCURRENT, INTERLEAVED, Arm, run_benchmark, run_side_by_side
from raylift.measure.sweep import SweepSpec
from raylift.release.canary import CanaryPlan, canary_name, same_config_arms
from raylift.release.decision import (
    CONFIRM_ABOVE,
    CONFIRM_FACTOR,
    JUDGED_BESIDE,
    PILOT_DECIDES_ABOVE,
    aa_spread,
    confirmation_requests,
    headline_change,
)
from raylift.release.gates import assess, level_breach
from raylift.release.state import DeploymentState, run_file, run_name
from raylift.serve.config import app_by_name
from raylift.serve.placement import arms_placement, uses_accelerators
from raylift.store import ObjectStore
from raylift.targets.base import Target

log = logging.getLogger(__name__)

Progress = Callable[[str], None]

#: How many of the app's last A/A headlines its noise is learned from.
AA_WINDOW = 10
#: The in-release A/A arm of an interleaved measurement: the baseline's replica measured again in its own turn.
AA_ARM = "baseline_aa"


def measurement_design(placement: Mapping[str, Any], *, release: str, arms_share_host: bool) -> dict[str, Any]:
    """How a release's two arms are measured, and why: ``{"name": concurrent|interleaved, "why": ...}``.

    ``placement``: :func:`placement_of_arms`'s record (each arm's Ray nodes, or a note); ``arms_share_host``: the
    target runs every node on one machine (``local``: its Ray nodes and a blue/green pair's two clusters are
    process groups on the same cores). Arms on accelerators own their devices: concurrent. Arms on Ray nodes with
    none in common, on a target whose nodes are hosts of their own: concurrent. Anything else, including a
    placement not known: interleaved (never at the same moment on what they might share)."""
    if placement.get("accelerators"):
        return {"name": CONCURRENT, "why": "the arms run on accelerators: each replica owns its devices"}
    if arms_share_host:
        where = "both clusters" if release == "blue_green" else "every Ray node"
        return {"name": INTERLEAVED, "why": f"{where} of this target run on one machine's cores: each arm is "
                                            "measured alone, in a random order each round"}
    if release == "blue_green":
        return {"name": CONCURRENT, "why": "blue/green: each arm on its own cluster's nodes"}
    cand = set((placement.get("candidate") or {}).get("nodes") or ())
    base = set((placement.get("baseline") or {}).get("nodes") or ())
    if not cand or not base:
        return {"name": INTERLEAVED, "why": "where the arms run is not known "
                                            f"({placement.get('note') or 'no node ids'}): each measured alone"}
    shared = sorted(cand & base)
    if shared:
        return {"name": INTERLEAVED, "why": f"the arms share Ray node(s) {', '.join(n[:8] for n in shared)}: "
                                            "each measured alone, in a random order each round"}
    return {"name": CONCURRENT, "why": "the arms run on distinct Ray nodes (hosts of their own)"}


def _aa_prefix(state: DeploymentState) -> str:
    return f"{state.prefix}/aa/"


def noise_evidence(state: DeploymentState) -> dict[str, Any]:
    """What the app's A/A log says of this stack's noise: ``aa_spread`` (None: fewer than
    :data:`raylift.release.decision.AA_MIN_SAMPLES` A/As), ``source`` in words, the ``headlines`` used."""
    records = [state.store.read_json(key) or {} for key in state.store.list(_aa_prefix(state))
               if key.endswith(".json")]
    records = sorted((r for r in records if isinstance(r.get("headline"), int | float)),
                     key=lambda r: str(r.get("at", "")))[-AA_WINDOW:]
    headlines = [float(r["headline"]) for r in records]
    return {"aa_spread": aa_spread(headlines), "headlines": headlines,
            "source": f"learned from this app's last {len(headlines)} A/A measurements (this release's included)"}


def aa_headline(result: Mapping[str, Any], baseline: Mapping[str, Any]) -> float | None:
    """The headline change of ``result`` against ``baseline`` as the gate computes it (None: nothing measured)."""
    judgement, _ = assess(dict(result), {}, dict(baseline), max_regression=DEFAULT_MAX_REGRESSION,
                          confidence=DEFAULT_REGRESSION_CONFIDENCE)
    return headline_change(judgement.as_dict())


def keep_aa(state: DeploymentState, run_id: str, kind: str, headline: float | None, at: str | None) -> bool:
    """Add one A/A headline (``kind``: ``in-release`` or ``same-config``) to the app's A/A log; False: nothing
    measured."""
    if headline is None:
        return False
    state.store.write_json(f"{_aa_prefix(state)}{run_name(run_id)}-{kind}.json",
                           {"run_id": run_id, "kind": kind, "headline": headline, "at": at})
    log.info("A/A (%s): headline %+.1f%% joins the app's A/A log, what the gate learns its noise from", kind,
             100 * headline)
    return True


def learn_noise(state: DeploymentState, run_id: str, plan: CanaryPlan | None, result: dict[str, Any],
                baseline: Mapping[str, Any] | None) -> dict[str, Any]:
    """This release's A/As into the app's log (its in-release A/A; its canary when both arms ran the same config),
    then what the log says (:func:`noise_evidence`)."""
    at = str(result.get("started_at") or "")
    kept = {"in-release": (result.get("aa") or {}).get("headline_change")}
    if plan is not None and baseline is not None and same_config_arms(plan):
        kept["same-config"] = aa_headline(result, baseline)
    for kind, headline in kept.items():
        keep_aa(state, run_id, kind, headline, at)
    return {**noise_evidence(state), "this_release": kept}


def measure(target: Target, deployed: Mapping[str, Any], endpoint: str, served_name: str, app_name: str,
            options: dict[str, Any], *, sweep: SweepSpec | None, slos: dict[str, float],
            progress: Progress, state: DeploymentState | None = None,
            run_id: str | None = None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The candidate's results and, in a canary release, the serving app's measured beside it (else None).
    ``options``: :func:`raylift.measure.runner.run_benchmark`'s keyword arguments, ``slos`` among them.
    ``state``/``run_id``: the app's records, for the noise the gate learns (:func:`learn_noise`)."""
    if deployed.get("release") in JUDGED_BESIDE:
        result, baseline = measure_canary(target, deployed, endpoint, served_name, app_name, options, slos=slos,
                                          progress=progress)
        if state is not None and run_id is not None:
            saved = state.canary(run_id) if deployed.get("release") == "canary" else None
            result["noise"] = learn_noise(state, run_id, CanaryPlan.from_dict(saved) if saved else None, result,
                                          baseline)
        return result, baseline
    result = run_benchmark(endpoint, served_name, sweep=asdict(sweep) if sweep else None,
                           slo_breach=level_breach(slos), progress=progress, **options)
    return result, None


def measure_canary(target: Target, deployed: Mapping[str, Any], endpoint: str, served_name: str, app_name: str,
                   options: dict[str, Any], *, slos: dict[str, float],
                   progress: Progress) -> tuple[dict[str, Any], dict[str, Any]]:
    """The canary (at ``endpoint``) and the serving app in the same rounds with the same prompts, the same load
    per replica; measured again at more requests when the pilot's change is unclear, that measurement the
    evidence. The candidate's result carries the pilot (when there was one) and where Ray placed the arms."""
    scale = int(deployed.get("baseline_scale") or 1)
    log.info(
        "%s release: the candidate (%s) and the serving app (%s, %d replica(s): %dx the requests, the "
        "same load per replica) measured in the same rounds with the same prompts",
        str(deployed.get("release")).replace("_", "/"), endpoint, deployed["baseline_endpoint"], scale, scale)
    side_by_side = {"candidate": Arm(endpoint, served_name),
                    "baseline": Arm(deployed["baseline_endpoint"],
                                    str(deployed.get("baseline_served_name") or served_name), scale)}
    release = str(deployed.get("release"))
    placement = (placement_of_arms(target, deployed, app_name)  # before: Ray does not move running replicas
                 if release == "canary" else
                 {"note": f"blue/green: each arm on its own cluster ({deployed.get('serving_cluster')} serving, "
                          f"{deployed.get('candidate_cluster')} the candidate's), of the same shape"})
    design = measurement_design(placement, release=release,
                                arms_share_host=bool(getattr(target, "arms_share_host", False)))
    log.info("measurement design: %s (%s)", design["name"], design["why"])
    options = {**options, "design": design["name"]}
    if design["name"] == INTERLEAVED:  # the A/A inside the release: the baseline again, in its own turn
        side_by_side[AA_ARM] = side_by_side["baseline"]
    arms = run_side_by_side(side_by_side, served_name, progress=progress, **options)
    result, baseline = arms["candidate"], arms["baseline"]
    more, pilot = confirmation(result, baseline, slos, options["requests_per_level"])
    if more is not None:
        log.info(
            "the pilot's headline change is %+.1f%% (between %+.0f%% and %+.0f%%): not clear enough to "
            "decide on, so the same two arms are measured again at %d requests per level, and that "
            "measurement is the evidence (raylift.release.confirmation_requests)",
            100 * pilot["headline_change"], 100 * CONFIRM_ABOVE, 100 * PILOT_DECIDES_ABOVE, more)
        options = {**options, "requests_per_level": more,
                   "max_seconds_per_level": options["max_seconds_per_level"] * CONFIRM_FACTOR}
        arms = run_side_by_side(side_by_side, served_name, progress=progress, **options)
        result, baseline = arms["candidate"], arms["baseline"]
        result["pilot"] = pilot
    result["placement"] = placement
    result["design"] = {**result.get("design", {}), "why": design["why"]}
    if AA_ARM in arms:
        result["aa"] = {"arm": "the baseline's replica measured again in its own turns of the same rounds",
                        "headline_change": aa_headline(arms[AA_ARM], baseline)}
    return result, baseline


def confirmation(candidate: dict[str, Any], baseline: dict[str, Any], slos: dict[str, Any],
                 requests_per_level: int) -> tuple[int | None, dict[str, Any]]:
    """Whether a canary's pilot measurement decides, as ``raylift.release`` rules: the requests per level to
    measure again with (None: it decides), and the pilot's figures for the record. Its headline does not depend
    on the gate's tolerance or confidence (the levels' weights scale together), so the defaults judge it."""
    judgement, _ = assess(candidate, slos, baseline, max_regression=DEFAULT_MAX_REGRESSION,
                          confidence=DEFAULT_REGRESSION_CONFIDENCE)
    judged = judgement.as_dict()
    pilot = {"requests_per_level": requests_per_level, "headline_change": headline_change(judged),
             "verdict": judged.get("verdict")}
    return confirmation_requests(judged, requests_per_level), pilot


def placement_of_arms(target: Target, deployed: Mapping[str, Any], app_name: str) -> dict[str, Any]:
    """Where Ray placed the canary's two arms (:mod:`raylift.serve.placement`), read from Serve's own status; the
    gate refuses a verdict an unlike placement alone could give. A note instead when it cannot be told
    (no Ray dashboard on this target, arms on accelerators, an arm without a running replica)."""
    candidate = str(deployed.get("canary_app") or canary_name(app_name))
    baseline = str(deployed.get("baseline_app") or app_name)
    try:
        config = target.current_serve_config()
        if uses_accelerators(a for a in (app_by_name(config, n) for n in (candidate, baseline)) if a):
            return {"note": "the arms run on accelerators (each replica owns its devices): not compared",
                    "accelerators": True}
        dashboard = target.serve_dashboard()  # None: a target that reaches Serve otherwise
        if dashboard is None:
            return {"note": "this target has no Ray dashboard to read the replicas' nodes from"}
        status = dashboard.serve_applications().get("applications") or {}
    except Exception as exc:  # noqa: BLE001 - evidence for the gate, never a reason to stop measuring
        log.warning("where Ray placed the arms was not read (%s: %s); the gate judges without it",
                    type(exc).__name__, exc)
        return {"note": f"not read: {type(exc).__name__}: {exc}"}
    placed = arms_placement(status, candidate, baseline)
    if placed is None:
        return {"note": f"no running replica of {candidate!r} or {baseline!r} in Serve's status"}
    if placed.favoured is not None:
        log.warning("Ray placed the arms unlike: %s; a verdict this favours the %s with is refused "
                    "(raylift.release, rule 6)", placed.describe(), placed.favoured)
    return placed.as_dict()


def target_cost(target: Target, result: Mapping[str, Any], options: Mapping[str, Any]) -> dict[str, Any]:
    """What the cluster the target runs costs per hour, and per 10⁶ output tokens at each level. Never
    blocks the gates: a target that cannot tell, or a node type without a price, gives the reason."""
    region = options.get("region") or DEFAULT_REGION
    try:
        region = options.get("region") or target.aws_region() or DEFAULT_REGION
        return run_cost(result, target.billed_nodes(), region=region, prices=options.get("prices"))
    except Exception as exc:  # noqa: BLE001 - cost is evidence for people, not a gate
        log.warning("benchmark cost not computed: %s", exc)
        return {"error": f"{type(exc).__name__}: {exc}", "region": region}


def with_cost(target: Target, result: dict[str, Any], *, app: str, target_name: str, release: str,
              cost: Mapping[str, Any]) -> dict[str, Any]:
    """``result`` labelled (app, target, release kind) and costed (:func:`target_cost`, logged)."""
    result["app"], result["target"] = app, target_name
    result["release"] = release
    result["cost"] = target_cost(target, result, cost)
    log.info("%s", format_cost(result["cost"]))
    return result


def keep_results(target: Target, store: ObjectStore, run_id: str, result: dict[str, Any],
                 baseline: dict[str, Any] | None, served_name: str) -> dict[str, Any]:
    """Store the run's results for the gate (``benchmark.json``; ``baseline.json``: the serving app measured
    with it) and llmperf's summary files, publish the dashboard's figures; returns the step's XCom."""
    store.write_json(run_file(run_id, "benchmark"), result)
    if baseline is not None:
        store.write_json(run_file(run_id, "baseline"), baseline)
    # the levels as llmperf writes its summary files, beside raylift's results (docs/benchmark-metrics.md)
    store.write_json(run_file(run_id, "llmperf_summary"), llmperf_files(result))
    try:  # the dashboard's figures (CloudWatch on AWS targets, nothing on local); never blocks the gate
        target.publish_benchmark(result, model=served_name, run_id=run_id)
    except Exception:
        log.exception("benchmark metrics not published; the gate still applies")
    return {"overall": result.get("overall", {}), "levels": without_samples(result.get("levels", [])),
            "release": result["release"], "cost": result["cost"], "sweep": result.get("sweep"),
            "results_uri": store.child_uri(run_file(run_id, "benchmark")),
            **({"baseline_uri": store.child_uri(run_file(run_id, "baseline"))} if baseline else {})}


def without_samples(levels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Levels for the XCom and the run record: the per-request samples stay in benchmark.json."""
    return [{k: v for k, v in level.items() if k != "samples"} for level in levels]
