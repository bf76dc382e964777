"""What a release measures, and what the benchmark step leaves for the gate.

Why in the release package: which measurement is the evidence is a release rule. A canary's first side-by-side
measurement is a pilot, measured again at more requests when its change is unclear
(:func:`raylift.release.decision.confirmation_requests`), and where Ray placed the two arms decides which verdicts
the gate may give (:mod:`raylift.serve.placement`, rule 6). The benchmark step resolves its Params, calls
:func:`measure`, and hands the results to :func:`keep_results`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

from raylift.config import DEFAULT_MAX_REGRESSION, DEFAULT_REGRESSION_CONFIDENCE
from raylift.measure.cost import DEFAULT_REGION, format_cost, run_cost
from raylift.measure.llmperf_summary import llmperf_files
from raylift.measure.runner import Arm, run_benchmark, run_side_by_side
from raylift.measure.sweep import SweepSpec
from raylift.release.canary import canary_name
from raylift.release.decision import (
    CONFIRM_ABOVE,
    CONFIRM_FACTOR,
    JUDGED_BESIDE,
    PILOT_DECIDES_ABOVE,
    confirmation_requests,
    headline_change,
)
from raylift.release.gates import assess, level_breach
from raylift.release.state import run_file
from raylift.serve.config import app_by_name
from raylift.serve.placement import arms_placement, uses_accelerators
from raylift.store import ObjectStore
from raylift.targets.base import Target

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def measure(target: Target, deployed: Mapping[str, Any], endpoint: str, served_name: str, app_name: str,
            options: dict[str, Any], *, sweep: SweepSpec | None, slos: dict[str, float],
            progress: Progress) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The candidate's results and, in a canary release, the serving app's measured beside it (else None).
    ``options``: :func:`raylift.measure.runner.run_benchmark`'s keyword arguments, ``slos`` among them."""
    if deployed.get("release") in JUDGED_BESIDE:
        return measure_canary(target, deployed, endpoint, served_name, app_name, options, slos=slos,
                              progress=progress)
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
    placement = (placement_of_arms(target, deployed, app_name)  # before: Ray does not move running replicas
                 if deployed.get("release") == "canary" else
                 {"note": f"blue/green: each arm on its own cluster ({deployed.get('serving_cluster')} serving, "
                          f"{deployed.get('candidate_cluster')} the candidate's), of the same shape"})
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
            return {"note": "the arms run on accelerators (each replica owns its devices): not compared"}
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
