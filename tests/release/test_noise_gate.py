"""raylift.release.decide knows its noise: a same-config (A/A) spread wider than the tolerance can resolve gives no
pass, no regression and no cumulative roll back, only *inconclusive* with the spread named."""

from __future__ import annotations

import math

import pytest

from raylift.errors import RayliftValueError
from raylift.release.decision import (
    AA_MIN_SAMPLES,
    FAILED,
    INCONCLUSIVE,
    NOISE_Z,
    PASS,
    PROMOTE,
    REGRESSED,
    ROLL_BACK,
    aa_spread,
    decide,
    noise_refusal,
)
from tests.test_release import ev, judgement

TOLERANCE = 0.10  # tests.test_release.judgement's


def test_the_learned_spread_is_the_rms_of_same_config_headlines_and_unknown_when_too_few() -> None:
    assert aa_spread([0.03, -0.04, 0.0]) == pytest.approx(math.sqrt((0.0009 + 0.0016) / 3))
    # a bias between two arms of one config is spread too: +8 % every time is not "no noise"
    assert aa_spread([0.08, 0.08, 0.08]) == pytest.approx(0.08)
    assert aa_spread([0.05] * (AA_MIN_SAMPLES - 1)) is None
    assert aa_spread([0.05, math.nan, 0.05]) is None  # not a measurement


@pytest.mark.parametrize("verdict, change", [(PASS, 0.0), (REGRESSED, 0.30)])
def test_a_spread_wider_than_the_tolerance_can_resolve_gives_inconclusive(verdict: str, change: float) -> None:
    spread = 0.129  # the three-node run's same-speed headline SD (docs/benchmark-metrics.md, session 34)
    decision = decide(ev(judgement=judgement(verdict, change), aa_spread=spread, aa_source="the last 8 releases",
                         on_inconclusive="pass"))
    assert decision.verdict == INCONCLUSIVE and decision.action == PROMOTE and not decision.becomes_anchor
    text = " ".join(decision.reasons)
    assert "12.9%" in text and "the last 8 releases" in text and "noise alone" in text, text
    # the same evidence with the tolerance able to resolve the spread decides as before
    quiet = decide(ev(judgement=judgement(verdict, change), aa_spread=0.03, on_inconclusive="pass"))
    assert quiet.verdict == verdict and quiet.action == (PROMOTE if verdict == PASS else ROLL_BACK)
    # on_inconclusive still decides the refused verdict
    held = decide(ev(judgement=judgement(verdict, change), aa_spread=spread, on_inconclusive="fail"))
    assert (held.action, held.verdict) == (ROLL_BACK, INCONCLUSIVE)


def test_the_cumulative_limit_does_not_roll_back_what_noise_could_give() -> None:
    noisy = decide(ev(judgement=judgement(INCONCLUSIVE, 0.12), aa_spread=0.2, on_inconclusive="pass"))
    assert (noisy.action, noisy.verdict) == (PROMOTE, INCONCLUSIVE)
    assert "20.0%" in " ".join(noisy.reasons)
    quiet = decide(ev(judgement=judgement(INCONCLUSIVE, 0.12), aa_spread=0.01, on_inconclusive="pass"))
    assert quiet.action == ROLL_BACK and quiet.verdict == "cumulative regression"


def test_missing_evidence_and_broken_slos_still_roll_back_however_noisy() -> None:
    assert decide(ev(judgement=judgement(FAILED), aa_spread=0.5)).action == ROLL_BACK
    assert decide(ev(slo_violations=("error rate 5% above 1%",), aa_spread=0.5)).action == ROLL_BACK


def test_the_threshold_is_the_tolerance_over_the_two_percent_quantile() -> None:
    assert NOISE_Z == pytest.approx(2.054, abs=1e-3)
    assert noise_refusal(TOLERANCE / NOISE_Z * 0.99, TOLERANCE) is None
    assert noise_refusal(TOLERANCE / NOISE_Z * 1.01, TOLERANCE) is not None
    assert noise_refusal(None, TOLERANCE) is None


@pytest.mark.parametrize("bad", [-0.1, math.inf, "0.1", True])
def test_a_bad_spread_is_refused_naming_it(bad: object) -> None:
    with pytest.raises(RayliftValueError, match="aa_spread"):
        decide(ev(aa_spread=bad))


def test_the_cumulative_limit_rolls_back_only_beyond_what_the_known_noise_gives() -> None:
    """The real stack's release 16 (bench/results/gate_real_aa_s41.json): a same-speed canary read +13.5 % against
    a fresh replica of the anchor's config with the A/A spread at 3.3 %; its own judgement inconclusive, it was
    rolled back by the +9 % cumulative limit on that reading alone. Within 2.05 spreads of the limit is noise's: it
    is inconclusive, the spread named; beyond them the limit rolls back as before, and with no spread known too."""
    from raylift.release.decision import FRESH_ANCHOR, noise_margin

    def release(change: float, spread: float | None, chain: tuple[float, ...] = ()) -> object:
        return decide(ev(judgement=judgement(INCONCLUSIVE, change), aa_spread=spread, on_inconclusive="pass",
                         baseline_runs=FRESH_ANCHOR if not chain else "fresh-serving", anchor_links=chain,
                         max_cumulative_regression=0.09))

    sixteen = release(0.135, 0.0325)
    assert (sixteen.action, sixteen.verdict, sixteen.becomes_anchor) == (PROMOTE, INCONCLUSIVE, False)
    text = " ".join(sixteen.reasons)
    assert "above the cumulative limit +9.0%" in text and "noise alone" in text and "3.2%" in text, text
    assert noise_margin(0.0325, 1) == pytest.approx(NOISE_Z * 0.0325)
    slower = release(0.30, 0.0325)  # a real slowdown is far beyond it
    assert (slower.action, slower.verdict) == (ROLL_BACK, "cumulative regression")
    assert release(0.135, None).action == ROLL_BACK  # no spread known: the limit as it was
    assert release(0.135, 0.005).action == ROLL_BACK  # a quiet stack: 13.5 % is beyond its noise
    # a chain compounds noisy readings: three of them carry sqrt(3) spreads
    chained = release(0.05, 0.0325, chain=(0.04, 0.03))  # 12.5 % since the anchor, margin 11.6 %
    assert (chained.action, chained.verdict) == (PROMOTE, INCONCLUSIVE) and "sqrt(3)" in " ".join(chained.reasons)
    assert release(0.10, 0.0325, chain=(0.08, 0.06)).action == ROLL_BACK  # 26 % since the anchor
    # never a pass that becomes the anchor while it reads over the limit
    passed = decide(ev(judgement=judgement(PASS, 0.095), aa_spread=0.0325, baseline_runs=FRESH_ANCHOR,
                       max_cumulative_regression=0.09, on_inconclusive="pass"))
    assert (passed.verdict, passed.becomes_anchor) == (INCONCLUSIVE, False)


def test_while_the_noise_is_being_learned_a_reading_over_the_limit_alone_is_inconclusive() -> None:
    """The real stack's second release of a fresh stack (bench/results/gate_real_aa_s41b.json, release 1): a
    same-speed canary read +15.3 % against a fresh replica of the anchor's config, the stack's A/A log holding 2
    readings (the spread not known: fewer than AA_MIN_SAMPLES), its own judgement inconclusive; it was rolled back
    by the +9 % limit on that reading alone. While the spread is being learned, such a single reading is
    inconclusive (on_inconclusive decides), the readings named; a regressed judgement still rolls back, and a chain
    of promoted readings or a stack that measures no A/A (0 readings: direct releases) keeps the limit as it was."""
    from raylift.release.decision import FRESH_ANCHOR

    def release(verdict: str, change: float, readings: int, spread: float | None = None) -> object:
        return decide(ev(judgement=judgement(verdict, change), aa_spread=spread, aa_readings=readings,
                         aa_source="learned from this app's last 2 A/A measurements", on_inconclusive="pass",
                         baseline_runs=FRESH_ANCHOR, max_cumulative_regression=0.09))

    second = release(INCONCLUSIVE, 0.153, readings=2)
    assert (second.action, second.verdict, second.becomes_anchor) == (PROMOTE, INCONCLUSIVE, False)
    text = " ".join(second.reasons)
    assert "still being learned (2 of the 3" in text and "above the cumulative limit +9.0%" in text, text
    assert release(INCONCLUSIVE, 0.153, readings=1).verdict == INCONCLUSIVE
    assert release(REGRESSED, 0.30, readings=2).action == ROLL_BACK  # the slower model: its judgement decides
    assert release(INCONCLUSIVE, 0.153, readings=0).action == ROLL_BACK  # no A/A measured here: the limit as it was
    # once the spread is known the margin rule takes over: at 3.25 % the limit rolls back beyond 9 % + 6.7 %
    assert release(INCONCLUSIVE, 0.153, readings=3, spread=0.0325).verdict == INCONCLUSIVE
    assert release(INCONCLUSIVE, 0.30, readings=3, spread=0.0325).action == ROLL_BACK
    # drift: readings promoted since the anchor (a chain) over the limit roll back as before, learned or not
    chained = decide(ev(judgement=judgement(INCONCLUSIVE, 0.0), aa_readings=1, on_inconclusive="pass",
                        anchor_links=(0.15, 0.10), max_cumulative_regression=0.09))
    assert (chained.action, chained.verdict) == (ROLL_BACK, "cumulative regression")
    # a pass read over the limit never becomes the anchor while the noise is learned
    passed = release(PASS, 0.095, readings=1)
    assert (passed.verdict, passed.becomes_anchor) == (INCONCLUSIVE, False)
    with pytest.raises(RayliftValueError, match="aa_readings"):
        decide(ev(aa_readings=-1))
