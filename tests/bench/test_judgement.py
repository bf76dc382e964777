"""The regression judgement and the gates around it, on synthetic per-request samples with known shifts."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from raylift.errors import RayliftValueError
from raylift.measure.judgement import format_judgement, judge, judge_errors, judge_metric
from raylift.release.gates import assess, evaluate, merged_slos


def _samples(n: int, scale: float, *, seed: int, sigma: float = 0.2, errors: int = 0) -> dict[str, Any]:
    """n requests whose TTFT, TPOT and e2e are lognormal around ``scale`` times 50/5/125 ms."""
    rng = random.Random(seed)
    ttft = [50 * scale * rng.lognormvariate(0, sigma) for _ in range(n)]
    tpot = [5 * scale * rng.lognormvariate(0, sigma) for _ in range(n)]
    e2e = [a + 15 * b for a, b in zip(ttft, tpot)]
    return {"ok": n, "errors": errors, "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e,
            "output_tokens_per_s": [16 / (e / 1e3) for e in e2e]}


def _level(c: int, samples: dict[str, Any]) -> dict[str, Any]:
    n = samples["ok"] + samples["errors"]
    p99 = max(samples["ttft_ms"], default=None)
    return {"concurrency": c, "requests": n, "errors": samples["errors"],
            "error_rate": samples["errors"] / n if n else 0.0, "output_tokens_per_s": 100.0,
            "ttft_ms": {"p99": p99}, "samples": samples}


def _run(*levels: dict[str, Any], model: str = "m") -> dict[str, Any]:
    requests = sum(lv["requests"] for lv in levels)
    errors = sum(lv["errors"] for lv in levels)
    return {"model": model, "levels": list(levels),
            "overall": {"requests": requests, "errors": errors, "error_rate": errors / requests if requests else 0}}


def test_known_shift_is_estimated_inside_its_interval() -> None:
    base = _samples(200, 1.0, seed=1)
    slow = _samples(200, 1.3, seed=2)
    m = judge_metric("ttft_ms", 4, slow["ttft_ms"], base["ttft_ms"], confidence=0.95, tolerance=0.1,
                     min_requests=8)
    assert m.verdict == "regressed" and m.low < 0.3 < m.high and abs(m.change - 0.3) < 0.08, m
    assert m.p_value < 1e-6 and m.n_new == m.n_baseline == 200
    # tokens/s: lower is worse, so the same slowdown is a drop that regresses
    t = judge_metric("output_tokens_per_s", 4, slow["output_tokens_per_s"], base["output_tokens_per_s"],
                     confidence=0.95, tolerance=0.1, min_requests=8)
    assert t.verdict == "regressed" and t.high < -0.1, t
    # faster is never a regression
    fast = judge_metric("output_tokens_per_s", 4, base["output_tokens_per_s"], slow["output_tokens_per_s"],
                        confidence=0.95, tolerance=0.1, min_requests=8)
    assert fast.verdict == "pass" and fast.change > 0.2


def test_three_outcomes_and_how_many_requests_would_decide() -> None:
    same = judge_metric("e2e_ms", 1, _samples(400, 1.0, seed=3)["e2e_ms"], _samples(400, 1.0, seed=4)["e2e_ms"],
                        confidence=0.95, tolerance=0.1, min_requests=8)
    assert same.verdict == "pass" and same.high < 0.1
    few = judge_metric("e2e_ms", 1, _samples(10, 1.05, seed=5, sigma=0.5)["e2e_ms"],
                       _samples(10, 1.0, seed=6, sigma=0.5)["e2e_ms"], confidence=0.95, tolerance=0.1,
                       min_requests=8)
    assert few.verdict == "inconclusive" and few.low < 0.1 < few.high and few.needed_requests > 10
    assert "inconclusive" in few.describe() and "[" in few.describe()
    # tokens/s the same way round: the estimate and the bound facing the limit give the requests needed
    drop = judge_metric("output_tokens_per_s", 1, _samples(10, 1.05, seed=5, sigma=0.5)["output_tokens_per_s"],
                        _samples(10, 1.0, seed=6, sigma=0.5)["output_tokens_per_s"], confidence=0.95, tolerance=0.1,
                        min_requests=8)
    assert drop.verdict == "inconclusive" and drop.needed_requests > 10


def test_error_rate_is_compared_as_a_proportion() -> None:
    assert judge_errors(4, (0, 32), (0, 32), confidence=0.95).verdict == "pass"
    one = judge_errors(4, (1, 32), (0, 32), confidence=0.95)
    assert one.verdict == "inconclusive" and one.low < 0 < one.change and one.needed_requests
    many = judge_errors(4, (12, 32), (0, 32), confidence=0.95)
    assert many.verdict == "regressed" and many.low > 0 and math.isclose(many.change, 12 / 32)


def test_judge_levels_baselines_and_bad_input() -> None:
    base = _run(_level(1, _samples(64, 1.0, seed=7)), _level(4, _samples(64, 1.0, seed=8)))
    slow = _run(_level(1, _samples(64, 1.3, seed=9)), _level(4, _samples(64, 1.0, seed=10)),
                _level(16, _samples(64, 1.0, seed=11)))
    j = judge(slow, base, confidence=0.95, tolerance=0.1, min_requests=8)
    assert j.verdict == "regressed"
    by = {(m.metric, m.concurrency): m.verdict for m in j.metrics}
    assert by[("ttft_ms", 1)] == "regressed" and by[("ttft_ms", 4)] != "regressed"
    assert by[("*", 16)] == "skipped" and by[("error_rate", 1)] == "pass"
    table = format_judgement(j.as_dict())
    assert "regressed" in table.splitlines()[0] and "ttft_ms" in table and "[+" in table
    # nothing to compare with: this run becomes the baseline
    assert judge(slow, None, confidence=0.95, tolerance=0.1, min_requests=8).verdict == "new baseline"
    renamed = judge(_run(*slow["levels"], model="other"), base, confidence=0.95, tolerance=0.1, min_requests=8)
    assert renamed.verdict == "new baseline" and "served model changed" in renamed.note
    # longer prompts and answers are other requests, not a slower release: a new baseline, never "regressed"
    smoke = {"name": "smoke", "mean_input_tokens": 32, "stddev_input_tokens": 4, "mean_output_tokens": 16,
             "stddev_output_tokens": 2, "seed": 0, "min_tokens": 1}
    longer = _run(*slow["levels"]) | {"profile": {**smoke, "name": "short", "mean_output_tokens": 64}}
    reprofiled = judge(longer, base | {"profile": smoke}, confidence=0.95, tolerance=0.1, min_requests=8)
    assert reprofiled.verdict == "new baseline" and "benchmark profile changed" in reprofiled.note
    assert "'smoke': 32 in / 16 out" in reprofiled.note and "'short': 32 in / 64 out" in reprofiled.note
    same_profile = judge(slow | {"profile": smoke}, base | {"profile": dict(smoke)}, confidence=0.95,
                         tolerance=0.1, min_requests=8)
    assert same_profile.verdict == "regressed"
    old = _run({**base["levels"][0], "samples": None})  # a last good run from before samples were kept
    assert judge(slow, old, confidence=0.95, tolerance=0.1, min_requests=8).verdict == "new baseline"
    with pytest.raises(RayliftValueError, match="confidence"):
        judge(slow, base, confidence=1.0, tolerance=0.1, min_requests=8)
    with pytest.raises(RayliftValueError, match="tolerance"):
        judge(slow, base, confidence=0.95, tolerance=1.0, min_requests=8)


def test_strict_makes_inconclusive_fail() -> None:
    base = _run(_level(1, _samples(12, 1.0, seed=12, sigma=0.5)))
    new = _run(_level(1, _samples(12, 1.08, seed=13, sigma=0.5)))
    judgement, violations = assess(new, {}, base)
    assert judgement.verdict == "inconclusive" and violations == []
    _, strict = assess(new, {}, base, strict=True)
    assert strict and all(v.kind == "regression" and "inconclusive" in v.message for v in strict)


def test_slos_are_merged_over_the_defaults_and_an_all_failed_level_fails() -> None:
    assert merged_slos({"max_ttft_p99_ms": 500}) == {"max_ttft_p99_ms": 500.0, "max_error_rate": 0.0}
    assert merged_slos({"max_error_rate": None}) == {}  # explicitly off
    with pytest.raises(RayliftValueError, match="unknown SLO keys"):
        merged_slos({"max_latency": 1})
    failed = _run(_level(1, {"ok": 0, "errors": 16, "ttft_ms": [], "tpot_ms": [], "e2e_ms": [],
                             "output_tokens_per_s": []}))
    failed["levels"][0]["ttft_ms"] = {"p99": None}
    kinds = {v.metric for v in evaluate(failed, merged_slos({"max_ttft_p99_ms": 500}), None)}
    assert kinds == {"successful_requests", "error_rate"}
    # even with every SLO off, a level where nothing succeeded does not pass
    (v,) = evaluate(failed, {}, None)
    assert v.metric == "successful_requests" and "every request failed at concurrency 1" in v.message


# -- no pass by absence: missing evidence fails the gate instead of passing unjudged ---------------------
def _cut_off(level: dict[str, Any], cancelled: int) -> dict[str, Any]:
    """``level`` with ``cancelled`` more requests cut off by the level's time bound (the runner's count)."""
    return {**level, "cancelled": cancelled}


def test_a_level_with_no_finished_request_fails() -> None:
    base = _run(_level(1, _samples(64, 1.0, seed=20)), _level(4, _samples(64, 1.0, seed=21)))
    nothing = {"ok": 0, "errors": 0, "ttft_ms": [], "tpot_ms": [], "e2e_ms": [], "output_tokens_per_s": []}
    new = _run(_level(1, _samples(64, 1.0, seed=22)), _cut_off(_level(4, nothing), 64))
    new["levels"][1]["ttft_ms"] = {"p99": None}
    j = judge(new, base, confidence=0.95, tolerance=0.1, min_requests=8)
    assert j.verdict == "failed", j
    (dead,) = [m for m in j.of("failed") if m.concurrency == 4 and m.metric == "successful_requests"]
    assert "64 cut off by the time limit" in dead.note and dead.needed_requests == 8, dead
    assert "at least 8" in dead.describe()
    # whatever strict is, and with no SLOs and no baseline at all, the gate fails naming cause and count
    for baseline in (base, None):
        _, violations = assess(new, {}, baseline)
        (v,) = [v for v in violations if v.concurrency == 4 and v.metric == "successful_requests"]
        assert v.kind == "evidence" and "cut off by the time limit" in v.message and "at least 8" in v.message, v
    # against the baseline, its cut-off requests are also an error rate of 100 %
    assert {v.metric for v in assess(new, {}, base)[1]} == {"successful_requests", "error_rate"}


def test_too_few_samples_fail_naming_the_requests_that_would_decide() -> None:
    exact = judge_metric("e2e_ms", 1, [1.0] * 5, [1.0] * 20, confidence=0.95, tolerance=0.1, min_requests=8)
    assert exact.verdict == "failed" and exact.needed_requests == 8, exact
    assert "5 samples" in exact.note and "fewer than 8" in exact.note and "8 requests per level" in exact.note
    # an interval exists (6 and 6 samples, far apart) but cannot decide: the estimate names more than 8
    noisy = judge_metric("e2e_ms", 1, _samples(6, 1.08, seed=23, sigma=0.5)["e2e_ms"],
                         _samples(6, 1.0, seed=24, sigma=0.5)["e2e_ms"], confidence=0.95, tolerance=0.1,
                         min_requests=8)
    assert noisy.verdict == "failed" and (noisy.needed_requests or 0) > 8, noisy
    assert f"{noisy.needed_requests} requests per level" in noisy.note
    # a whole run of 4 requests per level: failed, and every metric's gate message names the count
    base = _run(_level(1, _samples(4, 1.0, seed=25)))
    new = _run(_level(1, _samples(4, 1.0, seed=26)))
    judgement, violations = assess(new, {}, base)
    assert judgement.verdict == "failed" and judgement.needed_requests and judgement.needed_requests >= 8
    assert {v.metric for v in violations} >= {"ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s"}
    assert all("fewer than 8" in v.message and "requests per level" in v.message for v in violations), violations


def test_no_level_in_common_with_the_baseline_fails() -> None:
    base = _run(_level(1, _samples(64, 1.0, seed=27)), _level(4, _samples(64, 1.0, seed=28)))
    new = _run(_level(16, _samples(64, 1.0, seed=29)))
    j = judge(new, base, confidence=0.95, tolerance=0.1, min_requests=8)
    assert j.verdict == "failed", j
    assert "measure at concurrency 1, 4 (the baseline's levels)" in j.note
    _, violations = assess(new, {}, base)
    assert any("no level comparable with the baseline" in v.message and "concurrency 1, 4" in v.message
               and "8 requests" in v.message for v in violations), violations
    # the served model or the profile changed, or an old baseline without samples: still a new baseline
    assert judge(_run(*new["levels"], model="other"), base, confidence=0.95, tolerance=0.1,
                 min_requests=8).verdict == "new baseline"


def test_cut_off_requests_count_as_errors() -> None:
    base = _run(_level(4, _samples(64, 1.0, seed=30)))
    new = _run(_cut_off(_level(4, _samples(48, 1.0, seed=31)), 16))
    new["overall"]["cancelled"] = 16
    j = judge(new, base, confidence=0.95, tolerance=0.1, min_requests=8)
    (errors,) = j.of("regressed")
    assert errors.metric == "error_rate" and errors.n_new == 64 and errors.new_median == 16 / 64, errors
    assert new["levels"][0]["error_rate"] == 0.0  # the table's rate; the gate counts the cut-off requests
    violations = evaluate(new, merged_slos({}), base)
    slo = [v for v in violations if v.kind == "slo" and v.metric == "error_rate"]
    assert slo and slo[0].measured == 16 / 64, violations


# -- rounds: requests measured together share a slowly moving machine state ----------------------------
DRIFT_SIGMA, DRIFT_PHI = 0.2, 0.9  # the machine's state: AR(1) on the log scale, request to request


def _drifting_run(rng: random.Random, scale: float, *, rounds: int = 8, per_round: int = 8,
                  with_sizes: bool = True) -> dict[str, Any]:
    """A run whose requests, in time order, share a slowly moving factor (an AR(1) process, stationary
    SD DRIFT_SIGMA, correlation DRIFT_PHI from one request to the next) on top of each request's own:
    the structure bench/gate_noise.py measured here, where a run's median moved 2.5-4x more from run to
    run than its requests' spread implies."""
    n = rounds * per_round
    state, factors = rng.gauss(0, DRIFT_SIGMA), []
    for _ in range(n):
        factors.append(math.exp(state))
        state = DRIFT_PHI * state + rng.gauss(0, DRIFT_SIGMA * math.sqrt(1 - DRIFT_PHI ** 2))
    base = _samples(n, scale, seed=rng.randrange(1 << 30))
    merged: dict[str, Any] = {"ok": n, "errors": 0}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms"):
        merged[metric] = [v * f for v, f in zip(base[metric], factors)]
    merged["output_tokens_per_s"] = [16 / (e / 1e3) for e in merged["e2e_ms"]]
    if with_sizes:
        merged["round_sizes"] = {m: [per_round] * rounds for m in ("ttft_ms", "tpot_ms", "e2e_ms",
                                                                   "output_tokens_per_s")}
    return _run(_level(1, merged))


def _regressed_share(scale: float, *, with_sizes: bool, trials: int = 200) -> float:
    rng = random.Random(7)
    regressed = 0
    for _ in range(trials):
        base = _drifting_run(rng, 1.0, with_sizes=with_sizes)
        new = _drifting_run(rng, scale, with_sizes=with_sizes)
        regressed += judge(new, base, confidence=0.95, tolerance=0.10, min_requests=8).verdict == "regressed"
    return regressed / trials


def test_rounds_carry_the_drift_that_requests_compared_one_by_one_hide() -> None:
    # Unchanged runs on a drifting machine: request by request, the interval sees only the requests'
    # spread and calls many "regressed"; by round, the rounds' spread carries part of the drift (the part
    # that moves within a run; what moves only between runs is the confirmation run's job).
    by_request, by_round = _regressed_share(1.0, with_sizes=False), _regressed_share(1.0, with_sizes=True)
    print(f"unchanged runs judged regressed: by request {by_request:.1%}, by round {by_round:.1%}")
    assert by_request > 0.10, by_request
    assert by_round < by_request / 2, (by_round, by_request)
    # ... and a clear slowdown (like the +150 % TTFT of max_num_seqs 1 in the local gate test) is caught
    assert _regressed_share(2.0, with_sizes=True) >= 0.95


def test_rounds_fall_back_to_requests_when_too_few_or_inconsistent() -> None:
    from raylift.measure.judgement import by_round

    assert by_round([1.0] * 10, [2] * 5) == [1.0] * 5
    assert by_round([1.0] * 10, [2] * 4) is None  # sizes do not add up: not rounds of these values
    assert by_round([1.0] * 4, [1, 0, 1, 1, 1]) is None  # 4 non-empty rounds: too few
    j = judge_metric("ttft_ms", 1, [10.0] * 40, [10.0] * 40, confidence=0.95, tolerance=0.1, min_requests=8,
                     new_rounds=[8] * 5, base_rounds=[10] * 4)
    assert "by round" not in j.note  # the baseline's sizes do not add up: compared request by request
    j = judge_metric("ttft_ms", 1, [10.0] * 40, [10.0] * 40, confidence=0.95, tolerance=0.1, min_requests=8,
                     new_rounds=[8] * 5, base_rounds=[8] * 5)
    assert j.note == "by round: 5 vs 5" and j.verdict == "pass"
