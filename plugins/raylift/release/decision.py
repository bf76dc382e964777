"""The one owner of release decisions: promote, roll back or hold a candidate, from its evidence.

Pure (no I/O, no Airflow): the operators gather the evidence (smoke test, SLOs, the judgement of the candidate
against the serving app measured side by side, :mod:`raylift.release.canary`) and act on the :class:`ReleaseDecision`.

The rules, in order (the first that applies decides):

1. a first deploy (nothing serves to compare with): promote when the smoke test passed and no SLO broke; it
   becomes the **anchor**;
2. smoke test failed, or any SLO/evidence violation: roll back;
3. judgement verdict ``failed`` (the judgement could not be made: never a pass by absence) or ``regressed``:
   roll back;
4. the **cumulative change since the anchor** — the chain of the headline changes of the releases promoted
   since the last release whose verdict was a real ``pass``, and this release's, compounded
   (``prod(1 + x) - 1``) — above ``max_cumulative_regression``: roll back, naming the chain. This stops
   the ratchet of the sequential gate, where five releases each "not provably 10 % slower" drifted 1.75×;
5. ``new baseline`` outside a first deploy (nothing comparable with the anchor: another benchmark profile, an
   anchor without samples): roll back. **A change of what is measured starts no new anchor by itself**: only
   ``regression_baseline: none``, asked explicitly (:attr:`ReleaseEvidence.new_anchor_by`, rule 0), does; the
   gate judges a direct release against the anchor whenever anything comparable exists (a renamed model is
   the same requests; levels in common are judged, none in common is ``failed``). Before, such a direct
   release was promoted on its SLOs alone and became the anchor: a 3x slower one reset the chain;
6. ``inconclusive`` (and no judgement at all: nothing was judged) — and a ``pass`` or ``regressed`` that the
   arms' unlike Ray placement alone could have given (:attr:`ReleaseEvidence.placement_favours`,
   :mod:`raylift.serve.placement`): by ``on_inconclusive``: ``hold`` waits for a person (``approval`` "approve"
   promotes, "reject" rolls back), ``pass`` promotes, ``fail`` rolls back. Such a promote never becomes the anchor;
7. ``pass``: promote; it becomes the anchor (the chain starts again from it).

**A gate that knows its noise** (rule 6 too): :attr:`ReleaseEvidence.aa_spread` is how far two arms of the *same*
config differ on this stack (the SD of an A/A headline: :func:`aa_spread`, from an A/A inside the release or the
last releases' records). Where it is wider than the tolerance can resolve (:func:`noise_refusal`: above
tolerance / :data:`NOISE_Z`, the spread at which an unchanged release would cross the tolerance more often than the
2 % the gate is held to), a ``pass`` or ``regressed`` verdict, and a roll back by the cumulative limit, are refused
as noise could give them: *inconclusive*, the spread named, and ``on_inconclusive`` decides. Where the spread is
known and narrower, the cumulative limit still rolls back only a change beyond what that noise gives
(:func:`noise_margin`: the change less ``NOISE_Z`` spreads, one per measured headline compounded, above the limit);
nearer the limit it is *inconclusive*, the spread named; and while a stack's spread is still being learned (1 or 2
A/A readings: :func:`learning_noise`), a single reading over the limit that its own judgement did not find
regressed is *inconclusive* too (a chain of promoted readings keeps the limit). On the real stack a same-speed canary read +13.5 % against
its fresh baseline with an A/A spread of 3.3 % (a 4-SD reading) and was rolled back by the +9 % limit on that point
estimate alone, its own judgement inconclusive (``bench/results/gate_real_aa_s41.json``, release 16). Missing evidence and
broken SLOs still roll back (they are not comparisons).

What the baseline arm ran (:attr:`ReleaseEvidence.baseline_runs`): ``fresh-anchor``, a fresh replica of the
anchor's own config started beside the canary (Kayenta's baseline: as new as the canary, carrying no user
traffic), so the headline *is* the change since the anchor and no chain is compounded (its noise does not grow
with the chain); ``fresh-serving``, a fresh replica of the serving config (the chain compounds as below); or
``serving``, the serving app itself under its live traffic (no room for a fresh replica, or a direct release's
stored anchor samples). On the real stack a fresh replica of the serving config measured +54 % slower than the
serving app itself (A/A), so an unchanged canary judged against it was rolled back (``bench/gate_real_aa.py``).

Which measurement is the evidence (:func:`confirmation_requests`): a canary's first side-by-side measurement is a
pilot; when its headline is not clear (between :data:`CONFIRM_ABOVE` and :data:`PILOT_DECIDES_ABOVE`) the same
two arms are measured again at :data:`CONFIRM_FACTOR` times the requests, and only that measurement is judged.

Rule 0, before rules 2-7: a **new anchor asked for** (``regression_baseline: none``; the evidence names who
asked, the run's triggering user and run id as Airflow gives them): smoke, SLOs and a side-by-side judgement
that ``failed`` or ``regressed`` still roll back; otherwise the release is promoted and becomes the anchor, the
chain since the old anchor dropped, and every reason names who asked.

Numbers behind the defaults: ``bench/gate_error_rates.py`` (``docs/benchmark-metrics.md``, "Gate error rates:
old and new release process").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from statistics import NormalDist
from typing import Any

from raylift.config import DEFAULT_MAX_CUMULATIVE_REGRESSION, DEFAULT_ON_INCONCLUSIVE
from raylift.errors import RayliftValueError

PROMOTE, ROLL_BACK, HOLD = "promote", "roll_back", "hold"
ACTIONS = (PROMOTE, ROLL_BACK, HOLD)
ON_INCONCLUSIVE = ("hold", "pass", "fail")
APPROVALS = ("approve", "reject")

# The judgement's verdicts (raylift.measure.judgement) and the decision's own
PASS, REGRESSED, INCONCLUSIVE, FAILED, NEW_BASELINE = "pass", "regressed", "inconclusive", "failed", "new baseline"
SMOKE_FAILED, SLO_VIOLATED, CUMULATIVE_REGRESSION = "smoke failed", "slo violated", "cumulative regression"
NOT_JUDGED = "not judged"

# What the baseline arm of a release ran (ReleaseEvidence.baseline_runs)
FRESH_ANCHOR, FRESH_SERVING, SERVING = "fresh-anchor", "fresh-serving", "serving"
BASELINE_RUNS = (FRESH_ANCHOR, FRESH_SERVING, SERVING)
# The arm an unlike placement favours (ReleaseEvidence.placement_favours; raylift.serve.placement's names)
CANDIDATE_ARM, BASELINE_ARM = "candidate", "baseline"

# The largest compounded slowdown since the anchor (ratio - 1) before a release rolls back. Below 0.10 on
# purpose: a release exactly 10 % slower has a headline above 0.10 only half the time. In
# bench/gate_error_rates.py (this machine's slow spells, canary and serving app side by side, 128 requests per
# level, tolerance 0.10) 0.09 rejected 0-0.3 % of unchanged candidates and 64 % of 10 % slower ones; 0.10
# caught 52 %, 0.08 caught 73-75 % but falsely stopped more sequences of unchanged releases (the chain adds
# each promoted release's measurement noise until a "pass" resets it).
# A canary's side-by-side measurement is a pilot when its headline is above CONFIRM_ABOVE: the comparison is then
# measured again at CONFIRM_FACTOR x the requests per level, and that measurement alone is the release's evidence
# (the pilot is kept for the record). On the noise model fitted to real replicas (bench/gate_calibration.py,
# bench/gate_error_rates.py --calibrated) 128 requests per level left a headline SD of 5.5 %: 5 % of unchanged
# releases rejected, 29 % of five-release sequences falsely stopped; 512 met every target (0.5 %, 3.5 %), and the
# pilot keeps most releases at 128 (an unchanged one is confirmed about 3 times in 10).
# A pilot headline above PILOT_DECIDES_ABOVE decides as it is: a slowdown that large is not noise (4.5 SDs of the
# pilot's on real replicas), and measuring it again would only keep a bad candidate up longer.
CONFIRM_ABOVE = 0.03
PILOT_DECIDES_ABOVE = 0.25
CONFIRM_FACTOR = 4
# The metric the headline reads: end-to-end latency, what a user waits for (TTFT plus every token after it).
HEADLINE_METRIC = "e2e_ms"
HEADLINE_FALLBACK = "output_tokens_per_s"  # the same slowdown seen from the other side, when e2e is missing

# An unchanged release crosses a tolerance t with probability P(Z > t / spread) when its headline's SD (the A/A
# spread) is ``spread``; the gate's target is at most 2 % of unchanged releases rejected (docs/benchmark-metrics.md,
# "Gate error rates"), so a spread above t / NOISE_Z (t / 2.05) is wider than the tolerance can resolve.
NOISE_Z = NormalDist().inv_cdf(0.98)
# At least this many same-config A/A headlines before a spread learned from them is believed (fewer: not known).
AA_MIN_SAMPLES = 3

#: the release kinds (``raylift.release.plan``) whose candidate is judged beside the serving app, in the same rounds
#: (a canary on the serving cluster, blue/green on a second one); the others are judged against the anchor
JUDGED_BESIDE: tuple[str, ...] = ("canary", "blue_green")


@dataclass(frozen=True)
class ReleaseEvidence:
    """What a release decision is made from.

    :param first_deploy: nothing serves to compare with: promote if the smoke test and SLOs pass.
    :param smoke_passed: the candidate's smoke test passed.
    :param slo_violations: messages of broken SLOs and evidence failures (not regression verdicts).
    :param judgement: ``Judgement.as_dict()`` of the candidate against the serving app, measured together.
    :param anchor_links: headline changes (ratio - 1) of the releases promoted since the anchor, oldest first.
    :param max_cumulative_regression: the limit of the compounded change since the anchor (> 0).
    :param on_inconclusive: ``hold`` (ask a person), ``pass`` (promote) or ``fail`` (roll back).
    :param approval: the person's answer to a hold, ``approve`` or ``reject``; None: not asked (yet).
    :param new_anchor_by: ``regression_baseline: none`` was asked, by whom (e.g. "user 'admin', run
        manual__1"); None: judged against the anchor.
    :param baseline_runs: what the baseline arm ran: ``fresh-anchor`` (the judgement's change is the change
        since the anchor: ``anchor_links`` are not compounded), ``fresh-serving`` or ``serving``.
    :param placement_favours: the arm whose Ray node was less crowded while they were measured
        (:mod:`raylift.serve.placement`: ``candidate`` or ``baseline``); None: alike, or not known.
    :param placement: that placement in words, for the reasons.
    :param aa_spread: how far two arms of the same config differ on this stack (the SD of a same-config headline,
        a fraction: :func:`aa_spread`); None: not known.
    :param aa_source: where ``aa_spread`` comes from, in words (an A/A inside this release, the last N records).
    :param aa_readings: how many A/A headlines this stack's log holds (this release's included): 1 to
        :data:`AA_MIN_SAMPLES` - 1 means its noise is being learned (the spread not known yet, but measured)."""

    first_deploy: bool
    smoke_passed: bool
    slo_violations: tuple[str, ...]
    judgement: Mapping[str, Any] | None
    anchor_links: tuple[float, ...] = ()
    max_cumulative_regression: float = DEFAULT_MAX_CUMULATIVE_REGRESSION
    on_inconclusive: str = DEFAULT_ON_INCONCLUSIVE
    approval: str | None = None
    new_anchor_by: str | None = None
    baseline_runs: str = SERVING
    placement_favours: str | None = None
    placement: str = ""
    aa_spread: float | None = None
    aa_source: str = ""
    aa_readings: int = 0


@dataclass(frozen=True)
class ReleaseDecision:
    """What to do with the candidate, why (each reason names its numbers), and what the anchor chain becomes.

    ``headline_change`` is this release's change against what serves, ``cumulative_change`` the compounded
    change since the anchor with this release included (ratio - 1; + is slower); None when not measured.
    ``against_anchor``: the headline was measured against the anchor's own config (it is the cumulative change)."""

    action: str
    verdict: str
    reasons: tuple[str, ...]
    headline_change: float | None
    cumulative_change: float | None
    becomes_anchor: bool
    new_anchor_by: str | None = None
    against_anchor: bool = False

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reasons"] = list(self.reasons)
        return out

    def describe(self) -> str:
        """One paragraph for logs and the gate's error message."""
        return f"{self.action} ({self.verdict}): " + "; ".join(self.reasons)


def _metric_change(m: Mapping[str, Any]) -> tuple[float, float] | None:
    """A metric's change as a latency ratio - 1 and its interval's half-width, or None if not measured."""
    change, low, high = m.get("change"), m.get("low"), m.get("high")
    if not isinstance(change, int | float) or not math.isfinite(change) or m.get("verdict") == "skipped":
        return None
    half = (high - low) / 2 if isinstance(low, int | float) and isinstance(high, int | float) else math.nan
    if m.get("metric") == HEADLINE_FALLBACK:  # tokens/s down to 1/(1+x) is the same as latency up by x
        if change <= -1:
            return None
        rel = 1 / (1 + change)
        return rel - 1, half * rel * rel  # delta method: d(1/(1+c))/dc = -1/(1+c)^2
    return float(change), half


def headline_change(judgement: Mapping[str, Any]) -> float | None:
    """ONE number per comparison, the release's slowdown against what serves (ratio - 1; + = slower).

    End-to-end latency's Hodges–Lehmann change, pooled over the concurrency levels both runs have: the
    inverse-variance weighted mean (a fixed-effect meta-analysis; each level's variance from its interval's
    half-width, plain mean when a width is missing or 0). Why this one: e2e is what a user waits for and
    already holds TTFT and every inter-token gap, so one metric stands for all four (no multiplicity: the
    cumulative rule tests one number per release, not the max of eight); and pooling the levels uses every
    request of the comparison, so its noise is ~1/sqrt(levels) of one level's, which is what lets a point
    limit of 10 % separate an unchanged release from a 10 % slower one (bench/gate_error_rates.py). Levels
    are weighted by their precision, so a noisy high-concurrency level does not swamp the others.
    Falls back to output tokens/s (converted to the latency scale) when no level has e2e; None when
    neither was measured (a new baseline, a failed judgement)."""
    metrics = judgement.get("metrics") or []
    for name in (HEADLINE_METRIC, HEADLINE_FALLBACK):
        found = [c for m in metrics if m.get("metric") == name and (c := _metric_change(m)) is not None]
        if found:
            return _pooled(found)
    return None


def _pooled(values: Sequence[tuple[float, float]]) -> float:
    if all(math.isfinite(h) and h > 0 for _, h in values):
        weights = [1 / (h * h) for _, h in values]
        return sum(w * c for w, (c, _) in zip(weights, values)) / sum(weights)
    return sum(c for c, _ in values) / len(values)


def confirmation_requests(judgement: Mapping[str, Any], requests_per_level: int) -> int | None:
    """The requests per level to measure a canary's comparison again with, when ``judgement`` (the pilot's) is not
    clear enough to decide on: its headline above :data:`CONFIRM_ABOVE` and at most :data:`PILOT_DECIDES_ABOVE`.
    None: the pilot is the evidence (its headline is outside that band, or there is none: a failed measurement
    decides as it is)."""
    headline = headline_change(judgement)
    if headline is None or not CONFIRM_ABOVE < headline <= PILOT_DECIDES_ABOVE:
        return None
    return CONFIRM_FACTOR * int(requests_per_level)


def aa_spread(headlines: Sequence[float]) -> float | None:
    """The spread of same-config (A/A) headline changes: their root mean square around 0 (the true change of an
    A/A is 0, so each headline is all noise: a bias between the arms counts as spread, as it should). None with
    fewer than :data:`AA_MIN_SAMPLES`."""
    values = [float(x) for x in headlines if isinstance(x, int | float) and math.isfinite(x)]
    if len(values) < AA_MIN_SAMPLES:
        return None
    return math.sqrt(sum(x * x for x in values) / len(values))


def noise_refusal(spread: float | None, tolerance: float, source: str = "") -> str | None:
    """Why no verdict can be given at ``tolerance`` when two arms of the same config differ by ``spread`` (SD of
    the A/A headline): None when the spread is not known or the tolerance can resolve it."""
    if spread is None or not math.isfinite(spread) or not math.isfinite(tolerance) or tolerance <= 0:
        return None
    if spread <= tolerance / NOISE_Z:
        return None
    return (f"two arms of the same config differ by {_pct(spread).lstrip('+')} (SD of the A/A headline"
            f"{', ' + source if source else ''}) on this stack, wider than the tolerance {_pct(tolerance)} can "
            f"resolve (at most {_pct(tolerance / NOISE_Z).lstrip('+')}, so that an unchanged release crosses it at "
            "most 2 % of the time): noise alone could give a pass or a regression here")


def noise_margin(spread: float | None, headlines: int) -> float:
    """How far above the cumulative limit a change must read before noise alone would give it at most 2 % of the
    time: ``NOISE_Z`` A/A spreads of the compounded change (``headlines`` noisy readings: sqrt of their count); 0
    where the spread is not known (the limit applies as before)."""
    if spread is None or not math.isfinite(spread) or headlines < 1:
        return 0.0
    return NOISE_Z * spread * math.sqrt(headlines)


def learning_noise(evidence: ReleaseEvidence) -> str | None:
    """Why a reading over the cumulative limit cannot be told from noise yet (None: it can, or nothing is learned
    here): this stack measures its A/A spread, but holds fewer than :data:`AA_MIN_SAMPLES` readings of it. On the
    real stack a same-speed canary read +15.3 % on a stack's second release, its spread not known yet, and was
    rolled back by the limit on that reading alone (``bench/results/gate_real_aa_s41b.json``, release 1), while every
    slower release there was found regressed by its own judgement. Only a single reading is spared (the caller
    applies this where the change is this release's alone: measured against the anchor's own config, or nothing
    promoted since the anchor); a chain of promoted readings, and a stack that measures no A/A (direct releases),
    keep the limit as it was."""
    if evidence.aa_spread is not None or not 0 < evidence.aa_readings < AA_MIN_SAMPLES:
        return None
    return (f"this stack's noise is still being learned ({evidence.aa_readings} of the {AA_MIN_SAMPLES} A/A "
            "readings it needs"
            f"{', ' + evidence.aa_source if evidence.aa_source else ''}): noise alone could give that reading")


def compound(changes: Sequence[float]) -> float:
    """Changes (ratio - 1) one after another: ``prod(1 + x) - 1``."""
    return math.prod(1 + x for x in changes) - 1


def next_anchor_links(links: tuple[float, ...], decision: ReleaseDecision) -> tuple[float, ...]:
    """The anchor chain after ``decision``: () after a promote that made the anchor, ``links`` plus this
    release's headline after any other promote (unchanged when it had none: nothing was measured), and
    ``links`` unchanged after a roll back or a hold (what serves did not change)."""
    if decision.action != PROMOTE:
        return links
    if decision.becomes_anchor:
        return ()
    if decision.headline_change is None:
        return links
    if decision.against_anchor:  # measured against the anchor's own config: the one link is the whole change
        return (decision.headline_change,)
    return (*links, decision.headline_change)


def _check(evidence: ReleaseEvidence) -> None:
    if evidence.on_inconclusive not in ON_INCONCLUSIVE:
        raise RayliftValueError(
            f"on_inconclusive {evidence.on_inconclusive!r} is not one of {list(ON_INCONCLUSIVE)}: 'hold' asks a "
            "person, 'pass' promotes, 'fail' rolls back an inconclusive release")
    if evidence.approval is not None and evidence.approval not in APPROVALS:
        raise RayliftValueError(
            f"approval {evidence.approval!r} is not one of {list(APPROVALS)} (or None: not asked yet)")
    limit = evidence.max_cumulative_regression
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit) or limit <= 0:
        raise RayliftValueError(
            f"max_cumulative_regression {limit!r} must be a number above 0 (a fraction: 0.10 = 10 % slower "
            "than the anchor in all)")
    bad = [x for x in evidence.anchor_links
           if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x) or x <= -1]
    if evidence.baseline_runs not in BASELINE_RUNS:
        raise RayliftValueError(f"baseline_runs {evidence.baseline_runs!r} is not one of {list(BASELINE_RUNS)}")
    if evidence.placement_favours not in (None, CANDIDATE_ARM, BASELINE_ARM):
        raise RayliftValueError(f"placement_favours {evidence.placement_favours!r} is not one of "
                                f"{[CANDIDATE_ARM, BASELINE_ARM]} (or None: alike, or not known)")
    if evidence.new_anchor_by is not None and not str(evidence.new_anchor_by).strip():
        raise RayliftValueError("new_anchor_by is empty: a new anchor (regression_baseline 'none') names who asked")
    readings = evidence.aa_readings
    if isinstance(readings, bool) or not isinstance(readings, int) or readings < 0:
        raise RayliftValueError(f"aa_readings {readings!r} must be a whole number of 0 or more (the A/A headlines "
                                "this stack's log holds)")
    spread = evidence.aa_spread
    if spread is not None and (isinstance(spread, bool) or not isinstance(spread, int | float)
                               or not math.isfinite(spread) or spread < 0):
        raise RayliftValueError(f"aa_spread {spread!r} must be a finite fraction of 0 or more (the SD of a "
                                "same-config headline), or None when not known")
    if bad:
        raise RayliftValueError(f"anchor_links {list(evidence.anchor_links)!r}: each must be a finite change "
                                f"above -1 (ratio - 1), got {bad!r}")


def _pct(x: float) -> str:
    return f"{x:+.1%}"


def decide(evidence: ReleaseEvidence) -> ReleaseDecision:
    """The release decision from ``evidence`` (the module docstring's rules, in order).

    :raises RayliftValueError: ``on_inconclusive``, ``approval``, ``max_cumulative_regression``,
        ``baseline_runs`` or ``anchor_links`` is not a value allowed."""
    _check(evidence)
    decision = _decide(evidence)
    if evidence.baseline_runs == FRESH_ANCHOR and decision.headline_change is not None:
        return replace(decision, against_anchor=True)
    return decision


def _decide(evidence: ReleaseEvidence) -> ReleaseDecision:
    if evidence.first_deploy:
        if not evidence.smoke_passed:
            return ReleaseDecision(ROLL_BACK, SMOKE_FAILED, ("first deploy: the smoke test failed",),
                                   None, None, False)
        if evidence.slo_violations:
            return ReleaseDecision(ROLL_BACK, SLO_VIOLATED,
                                   tuple(f"first deploy: {v}" for v in evidence.slo_violations), None, None, False)
        return ReleaseDecision(PROMOTE, NEW_BASELINE,
                               ("first deploy: nothing serves to compare with; smoke test and SLOs passed, so it "
                                "is promoted and becomes the anchor",), None, 0.0, True)
    if not evidence.smoke_passed:
        return ReleaseDecision(ROLL_BACK, SMOKE_FAILED, ("the candidate's smoke test failed",), None, None, False)
    judgement = evidence.judgement or {}
    headline = headline_change(judgement) if judgement else None
    against_anchor = evidence.baseline_runs == FRESH_ANCHOR
    chain = () if against_anchor else evidence.anchor_links
    cumulative = compound((*chain, headline)) if headline is not None else None
    measured: list[str] = []
    if headline is not None and cumulative is not None and against_anchor:
        measured.append(f"headline change (e2e, pooled over levels) {_pct(headline)} against a fresh replica of "
                        "the anchor's config started beside the canary: the change since the anchor")
    elif headline is not None and cumulative is not None:
        measured.append(f"headline change (e2e, pooled over levels) {_pct(headline)} against "
                        f"{'a fresh replica of the serving config' if evidence.baseline_runs == FRESH_SERVING else 'the serving app itself, under its live traffic (the fallback: no fresh baseline replica ran)'}; "
                        f"{_pct(cumulative)} since the anchor ({_chain(chain, headline)})")
    if evidence.slo_violations:
        return ReleaseDecision(ROLL_BACK, SLO_VIOLATED, (*evidence.slo_violations, *measured), headline,
                               cumulative, False)
    verdict = str(judgement.get("verdict")) if judgement else NOT_JUDGED
    note = f" ({judgement['note']})" if judgement.get("note") else ""
    judged, placed = verdict, _placement_refusal(evidence, verdict)
    tolerance = judgement.get("tolerance") if judgement else None
    noisy = noise_refusal(evidence.aa_spread, float(tolerance) if isinstance(tolerance, int | float)
                          else evidence.max_cumulative_regression, evidence.aa_source)
    if placed is None and noisy is not None and verdict in (PASS, REGRESSED):
        placed = f"judged {verdict}, but {noisy}"
    if placed is not None:
        verdict = INCONCLUSIVE
    if evidence.new_anchor_by is not None and verdict not in (FAILED, REGRESSED):
        return _new_anchor(evidence, verdict, headline, measured)
    if verdict in (FAILED, REGRESSED):
        what = ("the judgement failed" + note + ": no verdict is no pass" if verdict == FAILED
                else f"judged regressed against what serves (tolerance "
                     f"{_pct(float(judgement.get('tolerance', math.nan)))}): {_worst(judgement)}")
        return ReleaseDecision(ROLL_BACK, verdict, (what, *measured), headline, cumulative, False)
    if verdict not in (PASS, INCONCLUSIVE, NEW_BASELINE, NOT_JUDGED):
        return ReleaseDecision(ROLL_BACK, FAILED, (f"unknown judgement verdict {verdict!r}: not a pass", *measured),
                               headline, cumulative, False)
    limit = evidence.max_cumulative_regression
    # a regression refused for the placement is refused whole: the same confounded headline does not roll it back;
    # nor does a headline whose A/A spread is wider than the tolerance can resolve (noise could give it), nor one
    # whose reading is over the limit by less than that noise gives (never a pass either: inconclusive)
    margin = noise_margin(evidence.aa_spread, 1 + len(chain))
    # while the spread is still being learned (then no margin is known) a single reading is spared whole
    learning = None if chain else learning_noise(evidence)  # a chain of promoted readings: the limit as it was
    if (cumulative is not None and limit < cumulative and (learning is not None or cumulative <= limit + margin)
            and placed is None and noisy is None and verdict in (PASS, INCONCLUSIVE)):
        spared = learning if learning is not None else (
            f"by less than noise alone gives here ({_pct(margin).lstrip('+')}: {NOISE_Z:.2f} x the A/A spread "
            f"{_pct(float(evidence.aa_spread or 0)).lstrip('+')}"
            f"{f' x sqrt({1 + len(chain)}) readings' if chain else ''}"
            f"{', ' + evidence.aa_source if evidence.aa_source else ''})")
        placed = f"{_pct(cumulative)} since the anchor is above the cumulative limit {_pct(limit)}, but {spared}"
        verdict = INCONCLUSIVE
    if (cumulative is not None and cumulative > limit + margin and not (placed is not None and judged == REGRESSED)
            and noisy is None and learning is None):
        return ReleaseDecision(
            ROLL_BACK, CUMULATIVE_REGRESSION,
            (f"{_pct(cumulative)} slower than the anchor (the last release that passed) in all: "
             + ("measured against a fresh replica of the anchor's config" if against_anchor
                else _chain(chain, headline))
             + f", above the cumulative limit {_pct(limit)} (judgement: {verdict})",),
            headline, cumulative, False)
    if verdict == PASS:
        return ReleaseDecision(PROMOTE, PASS, ("judged within the tolerance of what serves on every metric; it "
                                               "becomes the anchor", *measured), headline, cumulative, True)
    if verdict == NEW_BASELINE:
        return ReleaseDecision(
            ROLL_BACK, FAILED,
            (f"nothing this release measured is comparable with the anchor{note}, and it is not a first deploy: "
             "a change of what is measured starts no new anchor by itself. Benchmark it as the anchor was "
             "(its benchmark_profile, its concurrency levels), or set regression_baseline 'none' to start a new "
             "anchor (the release record names who asked)", *measured), headline, cumulative, False)
    if placed is not None:
        why = f"inconclusive: {placed}"
    elif verdict == INCONCLUSIVE:
        why = f"inconclusive: {_inconclusive(judgement)}" + (f"; {noisy}" if noisy else "")
    else:
        why = "not judged: no judgement of the candidate against what serves"
    return _on_inconclusive(evidence, verdict if verdict == INCONCLUSIVE else NOT_JUDGED, why, measured,
                            headline, cumulative)


def _placement_refusal(evidence: ReleaseEvidence, verdict: str) -> str | None:
    """Why the judgement's ``verdict`` is refused, when the arms' placement alone could have produced it: a pass
    of a canary that had the less crowded Ray node, a regression of one that had the more crowded (the node's
    effect is larger than the tolerance: :mod:`raylift.serve.placement`). None: the verdict stands (alike placement,
    or a verdict the placement worked against)."""
    favours = evidence.placement_favours
    if (favours, verdict) not in ((CANDIDATE_ARM, PASS), (BASELINE_ARM, REGRESSED)):
        return None
    return (f"judged {verdict}, but Ray placed the arms unlike ({evidence.placement or 'placement not described'}): "
            f"a replica's node neighbours change its speed more than the tolerance, and this placement favoured "
            f"the {favours}, so it alone could give this verdict; for a verdict, leave room for the canary and its "
            f"baseline on nodes of their own (target local: the workers Param, one node per replica)")


def _new_anchor(evidence: ReleaseEvidence, verdict: str, headline: float | None,
                measured: list[str]) -> ReleaseDecision:
    """Rule 0: ``regression_baseline: none``, asked by ``evidence.new_anchor_by``: promoted as the new anchor."""
    judged = (f"judged {verdict} beside what serves" if verdict not in (NOT_JUDGED, NEW_BASELINE)
              else "held to its smoke test and SLOs only (not judged against the old anchor)")
    why = (f"regression_baseline 'none', asked by {evidence.new_anchor_by}: a new anchor starts here; {judged}; "
           f"the {len(evidence.anchor_links)} change(s) chained since the old anchor are dropped")
    return ReleaseDecision(PROMOTE, NEW_BASELINE, (why, *measured), headline,
                           headline if headline is not None else 0.0, True, evidence.new_anchor_by)


def _on_inconclusive(evidence: ReleaseEvidence, verdict: str, why: str, measured: list[str],
                     headline: float | None, cumulative: float | None) -> ReleaseDecision:
    if headline is None:
        measured = [*measured, "no headline change measured: the anchor chain does not grow"]
    policy = evidence.on_inconclusive
    if policy == "pass":
        return ReleaseDecision(PROMOTE, verdict, (why, "on_inconclusive 'pass': promoted, not the anchor", *measured),
                               headline, cumulative, False)
    if policy == "fail":
        return ReleaseDecision(ROLL_BACK, verdict, (why, "on_inconclusive 'fail': rolled back", *measured),
                               headline, cumulative, False)
    if evidence.approval == "approve":
        return ReleaseDecision(PROMOTE, verdict, (why, "held, and approved by a person: promoted, not the anchor",
                                                  *measured), headline, cumulative, False)
    if evidence.approval == "reject":
        return ReleaseDecision(ROLL_BACK, verdict, (why, "held, and rejected by a person: rolled back", *measured),
                               headline, cumulative, False)
    return ReleaseDecision(HOLD, verdict, (why, "on_inconclusive 'hold': waiting for a person to approve or reject",
                                           *measured), headline, cumulative, False)


def _chain(links: Sequence[float], headline: float | None) -> str:
    parts = [f"{_pct(x)}" for x in links]
    if headline is not None:
        parts.append(f"this release {_pct(headline)}")
    if not links:
        return "the anchor is what serves; " + (parts[0] if parts else "nothing measured")
    return f"{len(links)} release(s) promoted since the anchor: " + ", ".join(parts)


def _worst(judgement: Mapping[str, Any]) -> str:
    bad = [m for m in judgement.get("metrics") or [] if m.get("verdict") == REGRESSED]
    if not bad:
        return "no metric named"
    texts = [f"{m.get('metric')} at concurrency {m.get('concurrency')} {_pct(m['change'])} "
             f"[{_pct(m['low'])}, {_pct(m['high'])}]"
             for m in bad[:3] if all(isinstance(m.get(k), int | float) for k in ("change", "low", "high"))]
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return (", ".join(texts) or f"{len(bad)} metric(s)") + more


def _inconclusive(judgement: Mapping[str, Any]) -> str:
    metrics = [m for m in judgement.get("metrics") or [] if m.get("verdict") == INCONCLUSIVE]
    needed = judgement.get("needed_requests")
    text = f"{len(metrics)} metric(s) could not be decided at this sample size"
    return text + (f"; about {needed} requests per level would decide them" if needed else "")
