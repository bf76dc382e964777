"""The regression judgement: a new benchmark run against the last good run's per-request samples.

A Kayenta-style canary judgement instead of one number per level under a fixed tolerance (which on a
busy machine mostly measured noise: 8 of 11 back-to-back pairs of an unchanged endpoint "regressed").
For each concurrency level both runs have, and each per-request metric (TTFT, TPOT, e2e, output
tokens/s; :data:`raylift.measure.metrics.SAMPLE_METRICS`):

- the change is the **Hodges–Lehmann** estimate of the shift between the two samples (the median of
  all pairwise ``new - baseline`` differences), relative to the baseline's median: ``+30 %`` = 30 % above
  it. Its **confidence interval** is the one that inverts the **Mann-Whitney U** test: the order
  statistics of those pairwise differences at U's critical value. ``p_value`` is
  :func:`scipy.stats.mannwhitneyu`'s two-sided test of "no change". (Raw differences, not log ratios:
  the tiny model often streams a whole answer in one chunk, a TPOT of 0, which a log cannot take.)
- "worse" is higher for the latencies and lower for tokens/s; the tolerance is a slowdown factor
  (``tolerance`` 0.15: latency up to 1.15 times, tokens/s down to 1/1.15 of the baseline).
- **regressed**: the whole interval is worse than the tolerance; **pass**: the whole interval is within
  it; **inconclusive**: the interval straddles it (the sample cannot tell at this confidence), with an
  estimate of the requests per level that would decide it (the interval narrows as 1/sqrt(n)).

The **error rate** is compared as a proportion: the difference new − baseline with Newcombe's hybrid
score interval (from each run's Wilson interval, :func:`scipy.stats.binomtest`). Regressed when the
whole interval is above 0; inconclusive when more errors than the baseline but the interval includes 0.
The absolute ``max_error_rate`` SLO (default 0) is the promise; this only says whether it got worse.

**Rounds.** Requests measured together are not independent on a real machine: they share a run-level
state (on this box the between-run SD of a level's median was 2.5-4x what its requests' spread implies,
so an unchanged endpoint was judged regressed in 4 of 9 back-to-back pairs; bench/gate_noise.py). The
benchmark sends each level in rounds spread over the run (:func:`raylift.measure.runner.rounds_for`);
when both runs have at least :data:`MIN_ROUNDS` rounds of a metric, the observations compared are the
rounds' medians, so the interval carries the variation between rounds, not just between requests.
Otherwise (old baselines, levels too small to split) the requests themselves are compared.

**No pass by absence.** Missing evidence is a verdict of its own, **failed**, never a pass; each such
judgement's note names the cause and ``needed_requests`` the requests per level that would decide:

- a level of the new run where no request succeeded (every one errored, or was cut off by the level's
  time bound, ``max_seconds_per_level``): judged even without a baseline, as metric ``successful_requests``;
- a metric with fewer than ``min_requests`` samples in either run (at least ``min_requests`` would
  decide; more where the samples already give an interval that straddles the limit);
- a baseline with samples but no level in common with the new run: "measure at concurrency X".

A metric neither run has a sample of (TPOT of non-streamed or one-token answers) is skipped, as is a level
the baseline lacks. Requests cut off by the time bound count as failed requests in the error-rate
comparison: errors + cancelled over requests + cancelled, in both runs (a level's ``error_rate``, as the
tables show it, leaves them out). The run's verdict is the worst of its metrics: failed > regressed >
inconclusive > pass. It is "new baseline" only when there is nothing to judge against: no earlier good run,
another served model, another benchmark profile, or a baseline that kept no samples (old records); a level
without a successful request fails the run even then.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from raylift.errors import RayliftValueError
from raylift.measure.metrics import SAMPLE_METRICS

# Metrics where a smaller value is worse (everything else: larger is worse).
LOWER_IS_WORSE = frozenset({"output_tokens_per_s"})
MAX_NEEDED_REQUESTS = 100_000
# Fewest rounds per run for the round-median comparison (with 4 against 4 the Mann-Whitney interval is
# already the full range of the differences; below that it cannot exclude anything at 95 %).
MIN_ROUNDS = 5

PASS, REGRESSED, INCONCLUSIVE, SKIPPED = "pass", "regressed", "inconclusive", "skipped"
NEW_BASELINE = "new baseline"
FAILED = "failed"  # the evidence to judge is missing: fails the gate whatever ``strict`` is
# The run's verdict is the first of these any metric has (else NEW_BASELINE).
VERDICT_RANK = (FAILED, REGRESSED, INCONCLUSIVE, PASS)


@dataclass(frozen=True)
class MetricJudgement:
    """One metric at one level: both medians, the estimated change and its interval, and the verdict.

    For latencies and tokens/s, ``change``/``low``/``high`` are ratios minus one (``0.3`` = 30 % above
    the baseline); for ``error_rate`` they are the difference of the two rates."""

    metric: str
    concurrency: int
    verdict: str
    baseline_median: float | None = None
    new_median: float | None = None
    change: float | None = None
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    n_baseline: int = 0
    n_new: int = 0
    needed_requests: int | None = None
    note: str = ""

    def describe(self) -> str:
        """One line for logs and gate messages."""
        where = f"{self.metric} at concurrency {self.concurrency}"
        if self.verdict == SKIPPED or self.change is None:
            return f"{where}: {self.verdict} ({self.note})"
        if self.metric == "error_rate":
            nums = (f"{self.new_median:.1%} vs {self.baseline_median:.1%} errors, difference "
                    f"{self.change:+.1%} [{self.low:+.1%}, {self.high:+.1%}]")
        else:
            nums = (f"median {self.new_median:.4g} vs {self.baseline_median:.4g}, change {self.change:+.1%} "
                    f"[{self.low:+.1%}, {self.high:+.1%}]")
        text = f"{where}: {self.verdict}: {nums}"
        return f"{text} ({self.note})" if self.note else text


@dataclass
class Judgement:
    """Every metric's judgement and the run's verdict: failed if any metric is (missing evidence), else
    regressed if any is, else inconclusive if any is, else pass (or "new baseline" when there is nothing
    to judge against: see the module docstring)."""

    verdict: str
    confidence: float
    tolerance: float
    metrics: list[MetricJudgement] = field(default_factory=list)
    note: str = ""

    def of(self, verdict: str) -> list[MetricJudgement]:
        return [m for m in self.metrics if m.verdict == verdict]

    @property
    def needed_requests(self) -> int | None:
        """Requests per level (in both runs) that would decide every failed and inconclusive metric."""
        needed = [m.needed_requests for m in self.of(FAILED) + self.of(INCONCLUSIVE) if m.needed_requests]
        return max(needed) if needed else None

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "confidence": self.confidence, "tolerance": self.tolerance,
                "note": self.note, "needed_requests": self.needed_requests,
                "metrics": [asdict(m) for m in self.metrics]}


def _shift_interval(new: Sequence[float], base: Sequence[float], confidence: float, *,
                    scale: float | None = None) -> tuple[float, float, float, float]:
    """Hodges–Lehmann shift of new against base, its Mann-Whitney confidence interval (both relative to
    ``scale``, by default the baseline's median), and the two-sided Mann-Whitney p-value of no shift."""
    import numpy as np
    from scipy import stats

    x, y = np.asarray(new, dtype=float), np.asarray(base, dtype=float)
    diffs = np.sort(np.subtract.outer(x, y).ravel())
    n, m = len(x), len(y)
    z = stats.norm.ppf(0.5 + confidence / 2)
    # U's lower critical value (normal approximation): the interval is [D_(k), D_(nm+1-k)], 1-based.
    k = math.floor(n * m / 2 - z * math.sqrt(n * m * (n + m + 1) / 12))
    k = max(k, 1)  # too few requests for this confidence: the widest interval the samples give
    scale = float(np.median(y)) if scale is None else float(scale)
    p = float(stats.mannwhitneyu(x, y, alternative="two-sided").pvalue)
    return (float(np.median(diffs)) / scale, float(diffs[k - 1]) / scale, float(diffs[n * m - k]) / scale,
            0.0 if math.isnan(p) else p)


def _needed(n: int, estimate: float, bound: float, limit: float) -> int:
    """Requests per level for the interval's side facing ``limit`` to clear it (width ~ 1/sqrt(n))."""
    half, gap = abs(estimate - bound), abs(estimate - limit)
    if not math.isfinite(half) or gap <= 0:
        return MAX_NEEDED_REQUESTS
    return min(MAX_NEEDED_REQUESTS, max(n + 1, math.ceil(n * (half / gap) ** 2)))


def by_round(values: Sequence[float], sizes: Sequence[int] | None) -> list[float] | None:
    """The median of each non-empty round (``sizes``: the values per round, in order), or None when
    there are fewer than :data:`MIN_ROUNDS` of them or the sizes do not add up."""
    import statistics

    if not sizes or sum(sizes) != len(values):
        return None
    medians, start = [], 0
    for size in sizes:
        if size:
            medians.append(statistics.median(values[start:start + size]))
        start += size
    return medians if len(medians) >= MIN_ROUNDS else None


def judge_metric(metric: str, concurrency: int, new: Sequence[float], base: Sequence[float], *,
                 confidence: float, tolerance: float, min_requests: int,
                 new_rounds: Sequence[int] | None = None, base_rounds: Sequence[int] | None = None
                 ) -> MetricJudgement:
    """Compare two samples of one metric (see the module docstring); by round when both have the
    rounds' sizes for it (``new_rounds``/``base_rounds``) and enough rounds. Fewer than ``min_requests``
    samples in either run is :data:`FAILED`, naming the requests per level that would decide; no sample
    in either run is :data:`SKIPPED` (the metric is not defined for these requests)."""
    import statistics

    common: dict[str, Any] = {"metric": metric, "concurrency": concurrency, "n_baseline": len(base), "n_new": len(new)}
    if not new and not base:
        return MetricJudgement(verdict=SKIPPED, note="no sample in either run", **common)
    if len(new) < min_requests or len(base) < min_requests:
        return _too_few(metric, new, base, confidence=confidence, tolerance=tolerance, min_requests=min_requests,
                        common=common)
    if statistics.median(base) <= 0:  # e.g. TPOT when most answers came in one chunk: no relative change
        return MetricJudgement(verdict=SKIPPED, baseline_median=0.0, new_median=statistics.median(new),
                               note="baseline median 0", **common)
    new_units, base_units = by_round(new, new_rounds), by_round(base, base_rounds)
    note = ""
    if new_units is not None and base_units is not None:
        # one observation per round: the interval's scale is the baseline's pooled median
        units_n = min(len(new_units), len(base_units))
        per_unit = min(len(new), len(base)) / units_n
        note = f"by round: {len(new_units)} vs {len(base_units)}"
        change, low, high, p = _shift_interval(new_units, base_units, confidence,
                                               scale=statistics.median(base))
    else:
        units_n, per_unit = min(len(new), len(base)), 1.0
        change, low, high, p = _shift_interval(new, base, confidence)
    verdict, facing, limit = _decide(metric, change, low, high, tolerance)
    needed = None
    if verdict == INCONCLUSIVE:
        needed = min(MAX_NEEDED_REQUESTS, math.ceil(_needed(units_n, change, facing, limit) * per_unit))
    return MetricJudgement(
        verdict=verdict, baseline_median=statistics.median(base), new_median=statistics.median(new),
        change=change, low=low, high=high, p_value=p, needed_requests=needed, note=note, **common)


def _decide(metric: str, change: float, low: float, high: float, tolerance: float) -> tuple[str, float, float]:
    """The verdict of an interval against the tolerance, the bound facing the limit, and the limit."""
    # "worse" is a rise in latency beyond 1 + tolerance times the baseline, or a drop in tokens/s below
    # 1 / (1 + tolerance) of it (the same slowdown seen from the other side)
    if metric in LOWER_IS_WORSE:
        limit = 1 / (1 + tolerance) - 1
        bad, good = high < limit, low >= limit
        facing = high if change < limit else low  # the bound that must clear the limit for a verdict
    else:
        limit = tolerance
        bad, good = low > limit, high <= limit
        facing = low if change > limit else high
    return (REGRESSED if bad else PASS if good else INCONCLUSIVE), facing, limit


def _too_few(metric: str, new: Sequence[float], base: Sequence[float], *, confidence: float, tolerance: float,
             min_requests: int, common: dict[str, Any]) -> MetricJudgement:
    """:data:`FAILED` for too few samples: the requests per level that would decide are at least
    ``min_requests``, more when the samples give an interval that straddles the limit (:func:`_needed`)."""
    import statistics

    needed, numbers = min_requests, dict[str, Any]()
    if len(new) >= 2 and len(base) >= 2 and statistics.median(base) > 0:  # an interval exists
        change, low, high, p = _shift_interval(new, base, confidence)
        verdict, facing, limit = _decide(metric, change, low, high, tolerance)
        if verdict == INCONCLUSIVE:
            needed = max(min_requests, _needed(min(len(new), len(base)), change, facing, limit))
        numbers = {"baseline_median": statistics.median(base), "new_median": statistics.median(new),
                   "change": change, "low": low, "high": high, "p_value": p}
    return MetricJudgement(
        verdict=FAILED, needed_requests=needed, **numbers, **common,
        note=(f"{len(new)} samples in this run and {len(base)} in the baseline, fewer than {min_requests}: "
              f"about {needed} requests per level (in both runs) would decide"))


def no_success_cause(level: Mapping[str, Any], *, max_seconds: float | None = None) -> str:
    """Why a level has no successful request, in words: its errors and its requests cut off by the time
    bound (``cancelled``), e.g. "every request failed at concurrency 4 (16 of 16: 16 cut off by the time
    limit)"."""
    c = level["concurrency"]
    errors, cancelled = int(level.get("errors", 0)), int(level.get("cancelled", 0) or 0)
    sent = int(level.get("requests", 0)) + cancelled
    if sent == 0:
        return f"no request was measured at concurrency {c}"
    parts = []
    if errors:
        parts.append(f"{errors} errors ({level['error_kinds']})" if level.get("error_kinds") else f"{errors} errors")
    if cancelled:
        bound = f", max_seconds_per_level {max_seconds:g} s" if max_seconds else ""
        parts.append(f"{cancelled} cut off by the time limit{bound}")
    return f"every request failed at concurrency {c} ({sent} of {sent}: {', '.join(parts) or 'errors'})"


def failed_requests(level: Mapping[str, Any]) -> tuple[int, int]:
    """A level's (failed, sent) requests as the gate counts them: its errors and the requests cut off by
    its time bound (``cancelled``), over all it sent. Unlike the level's ``error_rate`` (errors over
    finished requests, as the tables show it), a cut-off request counts against the candidate."""
    cancelled = int(level.get("cancelled", 0) or 0)
    return int(level.get("errors", 0)) + cancelled, int(level.get("requests", 0)) + cancelled


def _successful(level: Mapping[str, Any]) -> int:
    return int(level.get("requests", 0)) - int(level.get("errors", 0))


def _dead_level(level: Mapping[str, Any], result: Mapping[str, Any], min_requests: int) -> MetricJudgement:
    """:data:`FAILED` for a level of the new run without a successful request."""
    cause = no_success_cause(level, max_seconds=result.get("max_seconds_per_level"))
    advice = ("; raise max_seconds_per_level or make the endpoint answer within it"
              if level.get("cancelled") else "")
    return MetricJudgement(
        "successful_requests", level["concurrency"], FAILED, new_median=0.0, n_new=0,
        needed_requests=min_requests,
        note=f"{cause}: at least {min_requests} successful requests at this level would decide{advice}")


def wilson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Wilson score interval of a proportion k/n."""
    from scipy import stats

    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return float(ci.low), float(ci.high)


def judge_errors(concurrency: int, new: tuple[int, int], base: tuple[int, int], *, confidence: float
                 ) -> MetricJudgement:
    """Error rates (failed, requests) compared as proportions: Newcombe's interval of the difference.
    :func:`judge` passes :func:`failed_requests`: requests cut off by the time bound count as failed."""
    (k1, n1), (k2, n2) = new, base
    common: dict[str, Any] = {"metric": "error_rate", "concurrency": concurrency, "n_baseline": n2, "n_new": n1}
    if n1 < 1 or n2 < 1:
        return MetricJudgement(verdict=SKIPPED, note="no requests", **common)
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1, confidence)
    l2, u2 = wilson(k2, n2, confidence)
    diff = p1 - p2
    low = diff - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = diff + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    needed = None
    if low > 0:
        verdict = REGRESSED
    elif diff > 0:
        verdict = INCONCLUSIVE
        needed = _needed(min(n1, n2), diff, low, 0.0)
    else:
        verdict = PASS
    return MetricJudgement(verdict=verdict, baseline_median=p2, new_median=p1, change=diff, low=low, high=high,
                           needed_requests=needed, **common)


def judge(result: Mapping[str, Any], baseline: Mapping[str, Any] | None, *, confidence: float,
          tolerance: float, min_requests: int) -> Judgement:
    """Judge ``result`` against ``baseline`` (a benchmark result with per-level ``samples``), level by level.

    Missing evidence is :data:`FAILED`, not a pass (the module docstring lists the cases)."""
    if not 0.5 <= confidence < 1:
        raise RayliftValueError(f"regression confidence must be in [0.5, 1), got {confidence}")
    if not 0 <= tolerance < 1:
        raise RayliftValueError(f"regression tolerance (max_regression) must be in [0, 1), got {tolerance}")
    out = Judgement(NEW_BASELINE, confidence, tolerance)
    dead = {lv["concurrency"]: _dead_level(lv, result, min_requests)
            for lv in result["levels"] if _successful(lv) <= 0}
    reason = _new_baseline_reason(result, baseline)
    if reason is not None:
        cause, consequence = reason
        out.metrics = list(dead.values())
        if dead:  # nothing to compare with, but a level that measured nothing is no baseline either
            out.verdict = FAILED
            out.note = (f"{cause}, and no request succeeded at concurrency {', '.join(map(str, dead))}: "
                        "this run cannot become the baseline")
        else:
            out.note = f"{cause}: {consequence}"
        return out
    assert baseline is not None
    base_levels = {lv["concurrency"]: lv for lv in baseline.get("levels", []) if lv.get("samples")}
    for level in result["levels"]:
        c = level["concurrency"]
        base, new = base_levels.get(c), level.get("samples")
        if c in dead:
            out.metrics.append(dead[c])
        elif new is None:
            out.metrics.append(MetricJudgement(
                "*", c, FAILED, needed_requests=min_requests,
                note=f"this run kept no per-request samples at concurrency {c}: nothing to judge"))
        elif base is None:
            out.metrics.append(MetricJudgement("*", c, SKIPPED, note="no samples of this level in the baseline"))
        else:
            b = base["samples"]
            for metric in SAMPLE_METRICS:
                out.metrics.append(judge_metric(
                    metric, c, new[metric], b[metric], confidence=confidence, tolerance=tolerance,
                    min_requests=min_requests, new_rounds=(new.get("round_sizes") or {}).get(metric),
                    base_rounds=(b.get("round_sizes") or {}).get(metric)))
        if base is not None:  # cut-off requests count as failed ones, in both runs
            out.metrics.append(judge_errors(c, failed_requests(level), failed_requests(base), confidence=confidence))
    if not any(lv["concurrency"] in base_levels for lv in result["levels"]):
        levels = ", ".join(str(c) for c in sorted(base_levels))
        first = min(base_levels)
        out.note = (f"no level comparable with the baseline: measure at concurrency {levels} (the baseline's "
                    f"levels), at least {min_requests} requests per level")
        out.metrics.append(MetricJudgement("*", first, FAILED, n_baseline=_successful(base_levels[first]),
                                           needed_requests=min_requests, note=out.note))
    verdicts = {m.verdict for m in out.metrics}
    out.verdict = next((v for v in VERDICT_RANK if v in verdicts), NEW_BASELINE)
    return out


def _new_baseline_reason(result: Mapping[str, Any], baseline: Mapping[str, Any] | None
                         ) -> tuple[str, str] | None:
    """Why ``result`` has nothing to be judged against, and what follows (it starts a new baseline), or None."""
    if not baseline:
        return "no earlier good run", "this run becomes the baseline"
    if result.get("model") and baseline.get("model") and result["model"] != baseline["model"]:
        return (f"the served model changed ({baseline['model']!r} -> {result['model']!r})",
                "this run starts a new baseline")
    if result.get("profile") and baseline.get("profile") and result["profile"] != baseline["profile"]:
        # other prompt and output lengths measure other requests: a longer answer is no slower release
        return (f"the benchmark profile changed ({_profile_name(baseline['profile'])} -> "
                f"{_profile_name(result['profile'])})",
                "this run starts a new baseline; keep the profile from run to run to judge releases")
    if not any(lv.get("samples") for lv in baseline.get("levels", [])):
        return "the last good run kept no per-request samples", "this run becomes the baseline"
    return None


def _profile_name(profile: Any) -> str:
    """A profile as the log names it: its name and token lengths (custom profiles share one name)."""
    if not isinstance(profile, Mapping):
        return repr(profile)
    return (f"{profile.get('name')!r}: {profile.get('mean_input_tokens')} in / "
            f"{profile.get('mean_output_tokens')} out tokens")


_COLUMNS = (("conc", 5), ("metric", 20), ("baseline", 9), ("new", 9), ("change", 8), ("interval", 19),
            ("verdict", 13))


def format_judgement(judgement: Mapping[str, Any]) -> str:
    """A fixed-width table of a judgement (:meth:`Judgement.as_dict`) for logs and the report."""
    head = (f"regression judgement: {judgement['verdict']} (confidence {judgement['confidence']:.0%}, "
            f"tolerance {judgement['tolerance']:.0%})")
    if judgement.get("note"):
        head += f": {judgement['note']}"
    if not judgement.get("metrics"):
        return head
    header = " ".join(name.rjust(width) for name, width in _COLUMNS)
    lines = [head, header, "-" * len(header)]
    for m in judgement["metrics"]:
        if m["change"] is None:
            cells = [str(m["concurrency"]), m["metric"], "-", "-", "-", m["note"][:19], m["verdict"]]
        else:
            pct = "{:+.1%}" if m["metric"] == "error_rate" else "{:+.0%}"
            cells = [str(m["concurrency"]), m["metric"], f"{m['baseline_median']:.4g}", f"{m['new_median']:.4g}",
                     pct.format(m["change"]), f"[{pct.format(m['low'])}, {pct.format(m['high'])}]",
                     m["verdict"]]
        lines.append(" ".join(cell.rjust(width) for cell, (_, width) in zip(cells, _COLUMNS)))
    for m in judgement["metrics"]:  # the table cuts notes short: a failed judgement's cause in full
        if m["verdict"] == FAILED:
            lines.append(f"failed: {m['metric']} at concurrency {m['concurrency']}: {m['note']}")
    needed = judgement.get("needed_requests")
    if needed:
        lines.append(f"about {needed} requests per level (in both runs) would decide every failed and "
                     "inconclusive metric" + (" (or more: a change right at the tolerance)"
                                               if needed >= MAX_NEEDED_REQUESTS else ""))
    return "\n".join(lines)
