"""SLO and regression gates over a benchmark result: pure functions, the caller decides what to do.

SLOs are absolute limits, promises rather than comparisons. Given SLOs are merged over
:data:`raylift.config.DEFAULT_SLOS` (:func:`merged_slos`), so giving one never drops another; a value of
None turns that one off:

- ``max_ttft_p99_ms``: every concurrency level's TTFT p99 must be at or below it;
- ``min_output_tokens_per_s``: the best level's output tokens/s must reach it (the endpoint can
  deliver that throughput at some tested concurrency);
- ``max_error_rate``: the overall error rate must be at or below it, requests cut off by the level's time
  bound (``cancelled``) counted as failed: (errors + cancelled) / (requests + cancelled). The result's own
  ``error_rate`` (errors over finished requests, as the tables show it) leaves them out; the gate does not.

A level where no request succeeded (every one errored, or was cut off by ``max_seconds_per_level``)
violates the gate whatever SLOs are set: there is nothing to hold to a limit, and a p99 of nothing must
not pass.

Regression: the statistical judgement of :mod:`raylift.measure.judgement` against the last good run's
per-request samples. A metric judged "regressed" is a violation (kind ``"regression"``); "inconclusive"
is one only when ``strict``. A metric judged "failed" (the evidence is missing: a level without a
successful request, fewer than ``min_requests`` samples, no level in common with the baseline) is a
violation of kind ``"evidence"`` whatever ``strict`` is; its message names the cause and the requests
per level that would decide. A run of another served model or profile starts a new baseline instead of
failing (unless a level of it has no successful request).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from raylift.config import (
    DEFAULT_MAX_REGRESSION,
    DEFAULT_REGRESSION_CONFIDENCE,
    DEFAULT_SLOS,
    REGRESSION_MIN_REQUESTS,
)
from raylift.errors import RayliftValueError
from raylift.measure.judgement import (
    FAILED,
    INCONCLUSIVE,
    REGRESSED,
    Judgement,
    MetricJudgement,
    failed_requests,
    judge,
    no_success_cause,
)

SLO_KEYS = ("max_ttft_p99_ms", "min_output_tokens_per_s", "max_error_rate")


@dataclass(frozen=True)
class GateViolation:
    """One broken gate: which metric, what was measured, and the limit or baseline it broke."""

    metric: str
    measured: float
    limit: float
    kind: str  # "slo", "regression", or "evidence" (the judgement could not judge: missing evidence)
    concurrency: int | None = None
    detail: str = ""  # the judgement's own words for a regression; why, for an SLO without a measurement

    @property
    def message(self) -> str:
        where = f" at concurrency {self.concurrency}" if self.concurrency is not None else ""
        if self.detail:
            return self.detail
        if self.kind == "slo":
            return f"{self.metric}{where} = {self.measured:.4g}, SLO limit {self.limit:.4g}"
        return f"{self.metric}{where} = {self.measured:.4g} regressed against baseline {self.limit:.4g}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}


def merged_slos(given: Mapping[str, float | None] | None) -> dict[str, float]:
    """The SLOs in force: ``given`` over :data:`~raylift.config.DEFAULT_SLOS`, without the ones set to None."""
    given = dict(given or {})
    unknown = set(given) - set(SLO_KEYS)
    if unknown:
        raise RayliftValueError(f"unknown SLO keys {sorted(unknown)}; use {list(SLO_KEYS)}")
    return {k: float(v) for k, v in {**DEFAULT_SLOS, **given}.items() if v is not None}


def _check_slos(result: Mapping[str, Any], slos: Mapping[str, float | None]) -> list[GateViolation]:
    unknown = set(slos) - set(SLO_KEYS)
    if unknown:
        raise RayliftValueError(f"unknown SLO keys {sorted(unknown)}; use {list(SLO_KEYS)}")
    violations: list[GateViolation] = []
    levels = result["levels"]
    for level in levels:
        if _ok_requests(level) <= 0:  # all errors, all cut off by the time bound, or nothing sent
            violations.append(GateViolation(
                "successful_requests", 0, 1, "slo", level["concurrency"],
                detail=f"{no_success_cause(level, max_seconds=result.get('max_seconds_per_level'))}; "
                       "an all-failed level fails the gate whatever SLOs are set"))
    limit = slos.get("max_ttft_p99_ms")
    if limit is not None:
        for level in levels:
            p99 = level["ttft_ms"]["p99"]
            if p99 is not None and p99 > limit:
                violations.append(GateViolation("ttft_ms.p99", p99, limit, "slo", level["concurrency"]))
    limit = slos.get("min_output_tokens_per_s")
    if limit is not None:
        best = max((lv["output_tokens_per_s"] for lv in levels), default=0.0)
        if best < limit:
            violations.append(GateViolation("output_tokens_per_s", best, limit, "slo"))
    limit = slos.get("max_error_rate")
    if limit is not None:
        overall = result["overall"]
        failed, sent = failed_requests(overall)
        rate = failed / sent if "requests" in overall and sent else float(overall["error_rate"])
        if rate > limit:
            cut = int(overall.get("cancelled", 0) or 0)
            violations.append(GateViolation(
                "error_rate", rate, limit, "slo",
                detail=(f"error_rate = {rate:.4g} ({failed} of {sent} requests failed, {cut} of them cut off by "
                        f"the time limit), SLO limit {limit:.4g}") if cut else ""))
    return violations


def level_breach(slos: Mapping[str, float | None]) -> Callable[[Mapping[str, Any]], str | None]:
    """A saturation sweep's SLO stop rule: the first SLO one level breaks on its own (all requests failed,
    TTFT p99, error rate), or None. ``min_output_tokens_per_s`` is a floor for the best level, not a breach."""
    per_level = {k: v for k, v in slos.items() if k != "min_output_tokens_per_s"}

    def breach(level: Mapping[str, Any]) -> str | None:
        found = _check_slos({"levels": [level], "overall": level}, per_level)
        return found[0].message if found else None

    return breach


def tail_percentile(samples: int) -> str:
    """The highest TTFT percentile worth comparing for ``samples`` requests."""
    return "p99" if samples >= 100 else "p90" if samples >= 20 else "p50"


def _ok_requests(level: Mapping[str, Any]) -> int:
    return int(level.get("requests", 0)) - int(level.get("errors", 0))


def _violation(m: MetricJudgement) -> GateViolation:
    return GateViolation(m.metric, m.new_median if m.new_median is not None else math.nan,
                         m.baseline_median if m.baseline_median is not None else math.nan,
                         "evidence" if m.verdict == FAILED else "regression", m.concurrency, detail=m.describe())


def assess(
    result: Mapping[str, Any],
    slos: Mapping[str, float | None],
    baseline: Mapping[str, Any] | None,
    *,
    max_regression: float = DEFAULT_MAX_REGRESSION,
    confidence: float = DEFAULT_REGRESSION_CONFIDENCE,
    strict: bool = False,
    min_requests: int = REGRESSION_MIN_REQUESTS,
) -> tuple[Judgement, list[GateViolation]]:
    """The regression judgement of ``result`` against ``baseline``, and every SLO, regression and evidence
    violation (empty: the run passes). ``slos`` are used as given (see :func:`merged_slos`). Every metric
    judged failed is a violation whatever ``strict`` is; a level without a successful request is named
    once, by the judgement's words (its cause and the requests that would decide)."""
    judgement = judge(result, baseline, confidence=confidence, tolerance=max_regression, min_requests=min_requests)
    judged = [m for m in judgement.metrics
              if m.verdict in ((FAILED, REGRESSED, INCONCLUSIVE) if strict else (FAILED, REGRESSED))]
    dead = {m.concurrency for m in judged if m.metric == "successful_requests"}
    violations = [v for v in _check_slos(result, slos)
                  if not (v.metric == "successful_requests" and v.concurrency in dead)]
    violations += [_violation(m) for m in judged]
    return judgement, violations


def evaluate(
    result: Mapping[str, Any],
    slos: Mapping[str, float | None],
    baseline: Mapping[str, Any] | None,
    *,
    max_regression: float = DEFAULT_MAX_REGRESSION,
    confidence: float = DEFAULT_REGRESSION_CONFIDENCE,
    strict: bool = False,
    min_requests: int = REGRESSION_MIN_REQUESTS,
) -> list[GateViolation]:
    """Every SLO and regression violation of ``result`` (:func:`assess` without the judgement)."""
    return assess(result, slos, baseline, max_regression=max_regression, confidence=confidence, strict=strict,
                  min_requests=min_requests)[1]
