"""SLO and regression gates over a benchmark result: pure functions, the caller decides what to do.

SLOs (each None = not checked):

- ``max_ttft_p99_ms``: every concurrency level's TTFT p99 must be at or below it;
- ``min_output_tokens_per_s``: the best level's output tokens/s must reach it (the endpoint can
  deliver that throughput at some tested concurrency);
- ``max_error_rate``: the overall error rate must be at or below it.

Regression: for each concurrency level present in both runs with at least
``REGRESSION_MIN_REQUESTS`` successful requests each, output tokens/s may not drop, and the TTFT
tail may not rise, by more than ``max_regression`` (a fraction) against the baseline. The tail is
the highest percentile the smaller sample supports (:func:`tail_percentile`): p99 from 100
requests, p90 from 20, else p50 — a p99 of 8 requests is one request, and gating on it rolled back
healthy redeploys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from raylift.config import DEFAULT_MAX_REGRESSION, REGRESSION_MIN_REQUESTS
from raylift.errors import RayliftValueError

SLO_KEYS = ("max_ttft_p99_ms", "min_output_tokens_per_s", "max_error_rate")


@dataclass(frozen=True)
class GateViolation:
    """One broken gate: which metric, what was measured, and the limit or baseline it broke."""

    metric: str
    measured: float
    limit: float
    kind: str  # "slo" or "regression"
    concurrency: int | None = None

    @property
    def message(self) -> str:
        where = f" at concurrency {self.concurrency}" if self.concurrency is not None else ""
        if self.kind == "slo":
            return f"{self.metric}{where} = {self.measured:.4g}, SLO limit {self.limit:.4g}"
        return f"{self.metric}{where} = {self.measured:.4g} regressed against baseline {self.limit:.4g}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}


def _check_slos(result: Mapping[str, Any], slos: Mapping[str, float | None]) -> list[GateViolation]:
    unknown = set(slos) - set(SLO_KEYS)
    if unknown:
        raise RayliftValueError(f"unknown SLO keys {sorted(unknown)}; use {list(SLO_KEYS)}")
    violations: list[GateViolation] = []
    levels = result["levels"]
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
        if overall["error_rate"] > limit:
            violations.append(GateViolation("error_rate", overall["error_rate"], limit, "slo"))
    return violations


def tail_percentile(samples: int) -> str:
    """The highest TTFT percentile worth comparing for ``samples`` requests."""
    return "p99" if samples >= 100 else "p90" if samples >= 20 else "p50"


def _ok_requests(level: Mapping[str, Any]) -> int:
    return int(level.get("requests", 0)) - int(level.get("errors", 0))


def _check_regression(
    result: Mapping[str, Any], baseline: Mapping[str, Any], max_regression: float, min_requests: int
) -> list[GateViolation]:
    if result.get("model") and baseline.get("model") and result["model"] != baseline["model"]:
        raise RayliftValueError(
            f"baseline is for model {baseline['model']!r}, this run for {result['model']!r}; "
            "compare only runs of the same model and target"
        )
    base_levels = {lv["concurrency"]: lv for lv in baseline["levels"]}
    violations: list[GateViolation] = []
    for level in result["levels"]:
        base = base_levels.get(level["concurrency"])
        if base is None:
            continue
        samples = min(_ok_requests(level), _ok_requests(base))
        if samples < min_requests:
            continue  # too few requests to tell a regression from noise
        tps, base_tps = level["output_tokens_per_s"], base["output_tokens_per_s"]
        if base_tps > 0 and tps < base_tps * (1 - max_regression):
            violations.append(
                GateViolation("output_tokens_per_s", tps, base_tps, "regression", level["concurrency"])
            )
        tail = tail_percentile(samples)
        ttft, base_ttft = level["ttft_ms"].get(tail), base["ttft_ms"].get(tail)
        if ttft is not None and base_ttft is not None and ttft > base_ttft * (1 + max_regression):
            violations.append(
                GateViolation(f"ttft_ms.{tail}", ttft, base_ttft, "regression", level["concurrency"])
            )
    return violations


def evaluate(
    result: Mapping[str, Any],
    slos: Mapping[str, float | None],
    baseline: Mapping[str, Any] | None,
    *,
    max_regression: float = DEFAULT_MAX_REGRESSION,
    min_requests: int = REGRESSION_MIN_REQUESTS,
) -> list[GateViolation]:
    """Every SLO and regression violation of ``result``; an empty list means the run passes."""
    if not 0 <= max_regression < 1:
        raise RayliftValueError(f"max_regression must be a fraction in [0, 1), got {max_regression}")
    violations = _check_slos(result, slos)
    if baseline is not None:
        violations += _check_regression(result, baseline, max_regression, min_requests)
    return violations
