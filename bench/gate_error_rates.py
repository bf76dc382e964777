"""How often the release gate rejects a candidate, old process against new, under this machine's slow spells.

Issue 26's targets: an unchanged candidate falsely rejected in <= 2 %; a 10 %, 20 %, 30 % slower one rejected in
>= 50 %, >= 95 %, >= 99 %; five successive 10 % slowdowns stopped by the third release in >= 95 % of sequences.

**The model.** Every benchmark's per-request samples are drawn from the stub server's own latency model
(``tests/harness/stub_server.py --ttft-ms 20 --itl-ms 3 --jitter 0.3``: each request's TTFT and ITL times its own
lognormal factor, sigma 0.3), for the very requests the benchmark sends (the ``smoke`` profile's seeded output
lengths, ``raylift.measure.profiles.generate_requests``) in its rounds (``raylift.measure.runner.rounds_for``:
8 rounds of 8 at concurrency 1 and 4, the levels taking turns), shaped as ``levels[*].samples`` with
``round_sizes``, so :func:`raylift.release.gates.assess` / :func:`raylift.measure.judgement.judge` and
:func:`raylift.release.decide` judge them as they judge real results. On top:

- a **round effect**: every request of a round times one lognormal factor (sigma 0.05), the machine's state
  during that round;
- **drift**: a VIRTUAL clock carries a two-state process, normal (factor 1) and slow (factor uniform 1.4-2.6
  per spell), spells exponential with means 9 min (normal) and 3 min (slow): slow 25 % of the time, in
  spells of minutes (bench/README.md, docs/benchmark-metrics.md: the same replicas 1.4-2.6x slower for
  minutes; 2-3 of 10 back-to-back runs slow). A round's factor is the one in force when it starts; the clock
  advances by the rounds' own durations (concurrency 1: the sum of its e2e; 4: two waves, each its slowest);
- a candidate ``s`` slower has every delay times ``1 + s``.

**Old process** (today's ``BenchmarkOperator``): the candidate benchmarked alone at time t, judged against the
stored samples of the last good run (benchmarked one release gap earlier, 1 h: an independent state of the
machine); "regressed" -> 60 s pause -> a second benchmark judged alone decides; anything else passes and its
(deciding) samples become the next baseline (the ratchet).

**New process** (canary): candidate and serving app benchmarked in the same rounds (same drift factor; the
round effect shared by both arms by default, ``--independent-rounds`` to draw one per arm), judged candidate
vs baseline arm, decided by :func:`raylift.release.decide` with ``on_inconclusive`` = the scheduled default;
the anchor chain follows :func:`raylift.release.next_anchor_links`.

**Kayenta process** (``--processes kayenta``, issue 45): the baseline arm is a fresh replica of the anchor's config
started beside the canary (its own per-replica effect, no live traffic), so each headline is the change since the
anchor and no chain is compounded. ``--calibrated bench/results/gate_calibration.json`` replaces the stub's noise
model with the one ``bench/gate_calibration.py`` fitted to real replicas (per-replica effect, the serving arm's
live-traffic shift; in the canary-vs-serving process the serving arm carries both).

**Confirm process** (``--processes confirm``, raylift's gate): the Kayenta process, and a pilot whose headline is
not clear (``raylift.release.confirmation_requests``: between +3 % and +25 %) is measured again on the same two
replicas at 4x the requests, and that measurement alone decides; ``confirmed_share`` is its cost.

``--validate`` also runs a few trials of the new process over real HTTP against two real stub servers
(``raylift.measure.runner.run_side_by_side``) and compares their verdicts with the virtual ones.

    PYTHONPATH=plugins .cache/venvs/control/bin/python bench/gate_error_rates.py [--trials 400] [--validate 5]
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))

import raylift.release.decision as release_decision  # noqa: E402
from raylift.config import REGRESSION_MIN_REQUESTS  # noqa: E402
from raylift.measure.profiles import generate_requests, get_profile  # noqa: E402
from raylift.measure.runner import _split, rounds_for  # noqa: E402
from raylift.release.decision import (  # noqa: E402
    HOLD,
    PROMOTE,
    ROLL_BACK,
    ReleaseDecision,
    ReleaseEvidence,
    confirmation_requests,
    decide,
    next_anchor_links,
)
from raylift.release.gates import assess, merged_slos  # noqa: E402

RESULTS = ROOT / "bench" / "results"
PROFILE = "smoke"
MODEL_NAME = "stub"


@dataclass(frozen=True)
class Machine:
    """The stub's latency model, the benchmark's shape, and this machine's drift."""

    ttft_ms: float = 20.0
    itl_ms: float = 3.0
    sigma: float = 0.3  # per-request lognormal sigma of TTFT and of ITL (independent factors), as --jitter
    round_sigma: float = 0.05  # one lognormal factor per round: the machine's state during the round
    shared_round_effect: bool = True  # new process: both arms of a round share it (one machine, same moment)
    levels: tuple[int, ...] = (1, 4)
    requests_per_level: int = 128  # the new process's (the old one runs today's 64)
    normal_mean_s: float = 540.0
    slow_mean_s: float = 180.0
    slow_low: float = 1.4
    slow_high: float = 2.6
    release_gap_s: float = 3600.0  # time between releases (and from the old baseline to the candidate)
    confirm_pause_s: float = 60.0
    overhead_s: float = 3.0  # per benchmark: prompt sizing, connections, warm-up request
    # Fitted to real replicas by bench/gate_calibration.py (--calibrated); 0 = the stub's model above.
    replica_sigma: float = 0.0  # one lognormal factor per replica for its whole life (a fresh start's luck)
    serving_shift: float = 0.0  # the serving arm's log factor from carrying live traffic (mean)
    serving_sigma: float = 0.0  # ... and its release-to-release spread
    round_shared: float | None = None  # share of the round effect's variance common to the arms (None: the bool)


@dataclass(frozen=True)
class Gate:
    """The judgement's and the release decision's parameters."""

    tolerance: float = 0.10
    confidence: float = 0.95
    max_cumulative_regression: float = 0.09
    on_inconclusive: str = "pass"  # the scheduled default: nobody to answer a hold


class Drift:
    """A two-state (normal / slow) path on the virtual clock, drawn lazily, stationary from t = 0."""

    def __init__(self, rng: np.random.Generator, m: Machine) -> None:
        self.rng, self.m = rng, m
        slow = rng.random() < m.slow_mean_s / (m.slow_mean_s + m.normal_mean_s)
        self.edges: list[float] = [0.0]  # spell i covers [edges[i], edges[i+1])
        self.factors: list[float] = []
        self._add(slow)

    def _add(self, slow: bool) -> None:
        m = self.m
        self.factors.append(float(self.rng.uniform(m.slow_low, m.slow_high)) if slow else 1.0)
        self.edges.append(self.edges[-1] + float(self.rng.exponential(m.slow_mean_s if slow else m.normal_mean_s)))

    def at(self, t: float) -> float:
        while self.edges[-1] <= t:
            self._add(self.factors[-1] == 1.0)
        return self.factors[bisect.bisect_right(self.edges, t) - 1]


class Bench:
    """Benchmarks on the virtual clock: per-request samples shaped as ``run_benchmark``'s levels."""

    def __init__(self, m: Machine) -> None:
        self.m = m
        spec = get_profile(PROFILE)
        self.profile = {**spec.as_dict(), "prompt_sizing": "words"}
        # the requests of each level, in their rounds (the same seeded set every benchmark sends)
        self.plan: dict[int, list[np.ndarray]] = {}
        for c in m.levels:
            n_out = [s.output_tokens for s in generate_requests(spec, m.requests_per_level, seed_offset=c)]
            self.plan[c] = [np.asarray(r, dtype=float)
                            for r in _split(n_out, rounds_for(m.requests_per_level, c))]

    def run(self, rng: np.random.Generator, drift: Drift, t: float, factors: Sequence[float],
            shared_rounds: bool = True) -> tuple[list[dict[str, Any]], float]:
        """One benchmark of len(factors) arms at once from time t (each arm's delays times its factor):
        the arms' results and the time it ends."""
        m = self.m
        arms = len(factors)
        cols: list[dict[int, dict[str, list[list[float]]]]] = [
            {c: {k: [] for k in ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s")} for c in m.levels}
            for _ in range(arms)]
        t += m.overhead_s
        for r in range(max(len(p) for p in self.plan.values())):
            for c in m.levels:
                if r >= len(self.plan[c]):
                    continue
                n = self.plan[c][r]
                d = drift.at(t)
                shared = m.round_shared if m.round_shared is not None else (1.0 if shared_rounds else 0.0)
                if m.round_sigma:
                    z = math.sqrt(shared) * rng.normal() + math.sqrt(1 - shared) * rng.normal(size=arms)
                    round_f = np.exp(m.round_sigma * z)
                else:
                    round_f = np.ones(arms)
                scale = d * round_f * np.asarray(factors)  # per arm
                a = rng.lognormal(0.0, m.sigma, (arms, len(n)))
                b = rng.lognormal(0.0, m.sigma, (arms, len(n)))
                ttft = m.ttft_ms * a * scale[:, None]
                itl = m.itl_ms * b * scale[:, None]
                e2e = ttft + itl * (n - 1)
                toks = n / (e2e / 1e3)
                waves = [e2e[:, i:i + c].max(axis=1) for i in range(0, len(n), c)]
                t += float(np.max(np.sum(waves, axis=0))) / 1e3
                for i in range(arms):
                    col = cols[i][c]
                    col["ttft_ms"].append(ttft[i].tolist())
                    col["tpot_ms"].append(itl[i].tolist())
                    col["e2e_ms"].append(e2e[i].tolist())
                    col["output_tokens_per_s"].append(toks[i].tolist())
        return [self._result(cols[i]) for i in range(arms)], t

    def _result(self, cols: dict[int, dict[str, list[list[float]]]]) -> dict[str, Any]:
        levels = []
        for c, by_metric in cols.items():
            sizes = [len(x) for x in by_metric["e2e_ms"]]
            samples: dict[str, Any] = {"ok": sum(sizes), "errors": 0,
                                       **{k: [v for rnd in rows for v in rnd] for k, rows in by_metric.items()},
                                       "round_sizes": {k: sizes for k in by_metric}}
            levels.append({"concurrency": c, "requests": sum(sizes), "errors": 0, "cancelled": 0,
                           "error_rate": 0.0, "rounds": len(sizes), "samples": samples})
        return {"model": MODEL_NAME, "profile": self.profile, "levels": levels, "overall": {"error_rate": 0.0},
                "max_seconds_per_level": 120.0}


SLOS = merged_slos({})


def _assess(new: dict[str, Any], base: dict[str, Any], gate: Gate) -> tuple[dict[str, Any], list[str]]:
    judgement, violations = assess(new, SLOS, base, max_regression=gate.tolerance, confidence=gate.confidence,
                                   min_requests=REGRESSION_MIN_REQUESTS)
    return judgement.as_dict(), [v.message for v in violations if v.kind != "regression"]


def old_release(bench: Bench, rng: np.random.Generator, drift: Drift, t: float, factor: float,
                last_good: dict[str, Any], gate: Gate) -> tuple[bool, dict[str, Any], float, list[str]]:
    """Today's gate: (rejected, the new last good, end time, verdicts seen)."""
    (cand,), t = bench.run(rng, drift, t, [factor])
    j, slo = _assess(cand, last_good, gate)
    seen = [j["verdict"]]
    if slo:
        return True, last_good, t, seen
    if j["verdict"] == "regressed":  # confirmed after a pause by a second benchmark, judged alone
        (cand, ), t = bench.run(rng, drift, t + bench.m.confirm_pause_s, [factor])
        j, slo = _assess(cand, last_good, gate)
        seen.append(j["verdict"])
        if slo or j["verdict"] == "regressed":
            return True, last_good, t, seen
    return False, cand, t, seen  # pass / inconclusive: the ratchet


def replica(rng: np.random.Generator, m: Machine) -> float:
    """A new replica's own factor for its life (1 without a fitted per-replica effect)."""
    return float(rng.lognormal(0.0, m.replica_sigma)) if m.replica_sigma else 1.0


def new_release(bench: Bench, rng: np.random.Generator, drift: Drift, t: float, serving: float, factor: float,
                links: tuple[float, ...], gate: Gate, *, shared_rounds: bool, serving_replica: float = 1.0,
                baseline: float | None = None, confirm: Bench | None = None,
                confirmed: list[bool] | None = None) -> tuple[ReleaseDecision, float]:
    """The canary: both arms in the same rounds, judged, decided. The baseline arm is the serving app (its replica
    and its live traffic: ``serving_shift``/``serving_sigma``) or, given ``baseline`` (the true speed of the config
    it runs), a fresh replica of that config started beside the canary (Kayenta's baseline, no live traffic)."""
    m = bench.m
    if baseline is None:
        live = float(np.exp(m.serving_shift + m.serving_sigma * rng.normal())) if (m.serving_shift or m.serving_sigma) else 1.0
        base_f = serving * serving_replica * live
    else:
        base_f = baseline * replica(rng, m)
    factors = [base_f, serving * factor * replica(rng, m)]
    (base, cand), t = bench.run(rng, drift, t, factors, shared_rounds=shared_rounds)
    j, slo = _assess(cand, base, gate)
    again = confirm is not None and confirmation_requests(j, m.requests_per_level) is not None
    if confirm is not None and again:
        # the pilot is not clear: the same two replicas measured again at 4x the requests, which decides alone
        (base, cand), t = confirm.run(rng, drift, t, factors, shared_rounds=shared_rounds)
        j, slo = _assess(cand, base, gate)
    if confirmed is not None:
        confirmed.append(again)
    decision = decide(ReleaseEvidence(
        first_deploy=False, smoke_passed=True, slo_violations=tuple(slo), judgement=j, anchor_links=links,
        max_cumulative_regression=gate.max_cumulative_regression, on_inconclusive=gate.on_inconclusive))
    if decision.action == HOLD:
        raise RuntimeError("a scheduled simulation cannot answer a hold: use on_inconclusive pass or fail")
    return decision, t


def sequence(process: str, bench: Bench, rng: np.random.Generator, gate: Gate, steps: Sequence[float],
             *, shared_rounds: bool, confirm: Bench | None = None) -> dict[str, Any]:
    """Releases one after another (each ``steps[k]`` times the one before): where the first rejection came,
    and the true slowdown accepted by then (product of the accepted steps)."""
    m = bench.m
    drift = Drift(rng, m)
    t = 0.0
    serving = 1.0
    serving_replica = replica(rng, m)
    anchor = 1.0  # kayenta: the true speed of the anchor's config, which the fresh baseline arm runs
    links: tuple[float, ...] = ()
    last_good: dict[str, Any] = {}
    if process == "old":  # the serving release's own benchmark, stored one release gap before the first
        (last_good,), _ = bench.run(rng, drift, t, [1.0])
    verdicts: list[str] = []
    headlines: list[float | None] = []
    confirmed: list[bool] = []  # confirm: whether each release's pilot was measured again
    for k, step in enumerate(steps, start=1):
        t = k * m.release_gap_s
        if process == "old":
            rejected, last_good, _, seen = old_release(bench, rng, drift, t, serving * step, last_good, gate)
            verdicts.append("/".join(seen))
        elif process in ("kayenta", "confirm"):  # against a fresh replica of the anchor's config: cumulative
            decision, _ = new_release(bench, rng, drift, t, serving, step, (), gate, shared_rounds=shared_rounds,
                                      baseline=anchor, confirm=confirm if process == "confirm" else None,
                                      confirmed=confirmed)
            rejected = decision.action == ROLL_BACK
            verdicts.append(decision.verdict)
            headlines.append(decision.headline_change)
            if decision.action == PROMOTE and decision.becomes_anchor:
                anchor = serving * step
        else:
            decision, _ = new_release(bench, rng, drift, t, serving, step, links, gate, shared_rounds=shared_rounds,
                                      serving_replica=serving_replica)
            rejected = decision.action == ROLL_BACK
            verdicts.append(decision.verdict)
            headlines.append(decision.headline_change)
            if decision.action == PROMOTE:
                links = next_anchor_links(links, decision)
                serving_replica = replica(rng, m)  # the promoted release serves on replicas of its own
        if rejected:
            return {"stopped_at": k, "accepted": serving, "verdicts": verdicts, "headlines": headlines,
                    "confirmed": confirmed}
        serving *= step
    return {"stopped_at": None, "accepted": serving, "verdicts": verdicts, "headlines": headlines,
            "confirmed": confirmed}


ROWS: dict[str, list[float]] = {
    "unchanged": [1.0],
    "10% slower": [1.10],
    "20% slower": [1.20],
    "30% slower": [1.30],
    "five successive 10% slowdowns": [1.10] * 5,
    "five successive unchanged releases": [1.0] * 5,
    "five successive 3% slowdowns": [1.03] * 5,
}
# row -> (comparison, target, what is compared): issue 26's targets, and issue 45's for the sequences
TARGETS = {"unchanged": ("<=", 0.02, "rejected"), "10% slower": (">=", 0.50, "rejected"),
           "20% slower": (">=", 0.95, "rejected"), "30% slower": (">=", 0.99, "rejected"),
           "five successive 10% slowdowns": (">=", 0.95, "stopped_by_release_3"),
           "five successive unchanged releases": ("<=", 0.05, "stopped_at_all"),
           "five successive 3% slowdowns": ("<=", 0.05, "never_stopped_share")}


def run_row(process: str, row: str, m: Machine, gate: Gate, trials: int, seed: int, *, shared_rounds: bool
            ) -> dict[str, Any]:
    bench = Bench(m)
    factor = release_decision.CONFIRM_FACTOR  # read at run time: --confirm-factor may have set it
    confirm = Bench(replace(m, requests_per_level=factor * m.requests_per_level)) if process == "confirm" else None
    steps = ROWS[row]
    outs = []
    for i in range(trials):
        rng = np.random.default_rng([seed, i, len(steps), int(steps[0] * 1000)])
        outs.append(sequence(process, bench, rng, gate, steps, shared_rounds=shared_rounds, confirm=confirm))
    stopped = [o["stopped_at"] for o in outs]
    res: dict[str, Any] = {"trials": trials}
    if len(steps) == 1:
        res["rejected"] = sum(s is not None for s in stopped) / trials
        res["verdicts"] = dict(Counter(o["verdicts"][0] for o in outs))
        hl = [o["headlines"][0] for o in outs if o["headlines"] and o["headlines"][0] is not None]
        if hl:
            res["headline_mean"], res["headline_sd"] = statistics.fmean(hl), statistics.stdev(hl)
    else:
        res["stopped_by_release_3"] = sum(s is not None and s <= 3 for s in stopped) / trials
        res["stopped_at_all"] = sum(s is not None for s in stopped) / trials
        res["stopped_at_release"] = {str(k): sum(s == k for s in stopped) for k in range(1, len(steps) + 1)}
        res["never_stopped"] = sum(s is None for s in stopped)
        res["never_stopped_share"] = res["never_stopped"] / trials
        res["max_cumulative_slowdown_accepted"] = max(o["accepted"] for o in outs)
        res["median_release_stopped_at"] = statistics.median(s if s is not None else len(steps) + 1
                                                              for s in stopped)
        res["median_cumulative_slowdown_accepted"] = statistics.median(o["accepted"] for o in outs)
    if process == "confirm":  # the cost: the share of releases whose pilot was measured again (4x requests)
        flags = [c for o in outs for c in o["confirmed"]]
        res["confirmed_share"] = sum(flags) / max(1, len(flags))
    if row in TARGETS:
        op, target, key = TARGETS[row]
        share = res[key]
        res["target"] = f"{key} {op} {target:.0%}"
        res["meets_target"] = share <= target if op == "<=" else share >= target
    return res


PROCESS_NAMES = {"old": "old process (sequential baseline)", "new": "canary vs the serving app",
                 "kayenta": "canary vs a fresh replica of the anchor's config",
                 "confirm": "the same, an unclear pilot measured again at {factor}x the requests (raylift's gate)"}


def table(rows: dict[str, dict[str, dict[str, Any]]]) -> str:
    processes = [p for p in PROCESS_NAMES if any(p in by for by in rows.values())]
    names = [PROCESS_NAMES[p].format(factor=release_decision.CONFIRM_FACTOR) for p in processes]
    lines = ["| candidate | target | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(processes)]

    def cell(r: dict[str, Any]) -> str:
        if "rejected" in r:
            text = f"{r['rejected']:.1%} rejected"
        else:
            text = (f"{r['stopped_by_release_3']:.1%} stopped by release 3, {r['stopped_at_all']:.1%} at all, "
                    f"{r['never_stopped_share']:.1%} never; median accepted "
                    f"{r['median_cumulative_slowdown_accepted']:.2f}x, worst {r['max_cumulative_slowdown_accepted']:.2f}x")
        return text + (" (meets)" if r.get("meets_target") else " (misses)" if "meets_target" in r else "")

    for row, by in rows.items():
        target = next(iter(by.values())).get("target", "-")
        lines.append(f"| {row} | {target} | " + " | ".join(cell(by[p]) if p in by else "-" for p in processes) + " |")
    return "\n".join(lines)


def validate(m: Machine, gate: Gate, trials: int, budget_s: float) -> dict[str, Any]:
    """The new process over real HTTP: two real stub servers (serving, candidate) benchmarked side by side,
    judged and decided as above; verdicts per row, to set beside the virtual ones (no drift here)."""
    from contextlib import ExitStack

    from raylift.measure.runner import Arm, run_side_by_side
    from tests.harness.stub_server import running_stub

    t0 = time.monotonic()
    out: dict[str, Any] = {}
    for row, factor in (("unchanged", 1.0), ("10% slower", 1.1), ("20% slower", 1.2), ("30% slower", 1.3)):
        verdicts, headlines = [], []
        with ExitStack() as stack:
            urls = [stack.enter_context(running_stub(
                "--ttft-ms", str(m.ttft_ms * f), "--itl-ms", str(m.itl_ms * f), "--jitter", str(m.sigma),
                "--seed", str(100 + i))) for i, f in enumerate((1.0, factor))]
            for _ in range(trials):
                if time.monotonic() - t0 > budget_s:
                    break
                res = run_side_by_side({"baseline": Arm(urls[0]), "candidate": Arm(urls[1])}, MODEL_NAME,
                                       profile=PROFILE, concurrency=list(m.levels),
                                       requests_per_level=m.requests_per_level, metrics=False)
                j, slo = _assess(res["candidate"], res["baseline"], gate)
                d = decide(ReleaseEvidence(False, True, tuple(slo), j, (), gate.max_cumulative_regression,
                                           gate.on_inconclusive))
                verdicts.append(f"{d.action}:{d.verdict}")
                headlines.append(d.headline_change)
        out[row] = {"trials": len(verdicts), "decisions": dict(Counter(verdicts)),
                    "rejected": sum(v.startswith(ROLL_BACK) for v in verdicts) / max(1, len(verdicts)),
                    "headlines": [round(h, 4) if h is not None else None for h in headlines]}
    out["seconds"] = round(time.monotonic() - t0, 1)
    return out


def binom_p_two_sided(k: int, n: int, p: float) -> float:
    """Exact two-sided binomial test of k of n at rate p (the virtual one)."""
    from scipy import stats

    return float(stats.binomtest(k, n, min(max(p, 1e-9), 1 - 1e-9)).pvalue) if n else math.nan


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=400)
    ap.add_argument("--seed", type=int, default=26)
    ap.add_argument("--requests", type=int, default=Machine.requests_per_level)
    ap.add_argument("--tolerance", type=float, default=Gate.tolerance)
    ap.add_argument("--limit", type=float, default=Gate.max_cumulative_regression)
    ap.add_argument("--confidence", type=float, default=Gate.confidence)
    ap.add_argument("--on-inconclusive", default=Gate.on_inconclusive, choices=["pass", "fail"])
    ap.add_argument("--independent-rounds", action="store_true")
    ap.add_argument("--slow-mean-s", type=float, default=Machine.slow_mean_s)
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--processes", default="old,new")
    ap.add_argument("--validate", type=int, default=0, help="trials per row over real HTTP (0: none)")
    ap.add_argument("--validate-requests", type=int, default=64, help="requests per level over HTTP")
    ap.add_argument("--out", default="gate_error_rates", help="results/<out>.json; '-' writes nothing")
    ap.add_argument("--calibrated", type=Path, default=None,
                    help="bench/results/gate_calibration.json: the noise model fitted to real replicas "
                         "(bench/gate_calibration.py) instead of the stub's")
    # the pilot/confirm rule's three numbers (raylift.release.decision), to choose them by measurement (issue 56)
    ap.add_argument("--confirm-above", type=float, default=release_decision.CONFIRM_ABOVE,
                    help="a pilot headline above this (and at most --pilot-decides-above) is measured again")
    ap.add_argument("--pilot-decides-above", type=float, default=release_decision.PILOT_DECIDES_ABOVE)
    ap.add_argument("--confirm-factor", type=int, default=release_decision.CONFIRM_FACTOR,
                    help="the confirmation's requests per level, as a multiple of the pilot's")
    args = ap.parse_args()
    if not 0 <= args.confirm_above < args.pilot_decides_above or args.confirm_factor < 1:
        ap.error("need 0 <= --confirm-above < --pilot-decides-above and --confirm-factor >= 1")
    rule = {"CONFIRM_ABOVE": args.confirm_above, "PILOT_DECIDES_ABOVE": args.pilot_decides_above,
            "CONFIRM_FACTOR": args.confirm_factor}
    for name, value in rule.items():  # the product's function reads its module's constants when called
        setattr(release_decision, name, value)

    m = Machine(requests_per_level=args.requests, shared_round_effect=not args.independent_rounds,
                slow_mean_s=args.slow_mean_s)
    if args.calibrated is not None:
        fitted = json.loads(args.calibrated.read_text())["machine"]
        unknown = sorted(set(fitted) - set(asdict(m)))
        if unknown:
            ap.error(f"--calibrated {args.calibrated}: fields {unknown} are not the simulation's")
        m = replace(m, **fitted)
    gate = Gate(tolerance=args.tolerance, confidence=args.confidence, max_cumulative_regression=args.limit,
                on_inconclusive=args.on_inconclusive)
    old_gate = replace(gate, tolerance=0.10, confidence=0.95)  # today's defaults, whatever the new one tries
    t0 = time.monotonic()
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for row in args.rows.split(","):
        rows[row] = {}
        for process in args.processes.split(","):
            pm = replace(m, requests_per_level=64) if process == "old" else m
            if process not in PROCESS_NAMES:
                ap.error(f"--processes: {process!r} is not one of {list(PROCESS_NAMES)}")
            r0 = time.monotonic()
            rows[row][process] = run_row(process, row, pm, old_gate if process == "old" else gate, args.trials,
                                         args.seed, shared_rounds=m.shared_round_effect)
            print(f"{row:36s} {process}: {json.dumps({k: v for k, v in rows[row][process].items() if k not in ('verdicts', 'stopped_at_release')})} "
                  f"({time.monotonic() - r0:.0f} s)", flush=True)
    out: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                                     text=True).stdout.strip(),
        "seed": args.seed, "trials_per_row": args.trials,
        "calibrated_from": str(args.calibrated) if args.calibrated else None,
        "confirm_rule": rule, "machine": asdict(m), "new_gate": asdict(gate), "old_gate": asdict(old_gate) | {"requests_per_level": 64},
        "headline": "raylift.release.headline_change: e2e HL change pooled over levels (inverse variance)",
        "rows": rows, "seconds": round(time.monotonic() - t0, 1),
    }
    if args.validate:
        vm = replace(m, requests_per_level=args.validate_requests)
        v = validate(vm, gate, args.validate, budget_s=170)
        for row in ("unchanged", "10% slower", "20% slower", "30% slower"):
            if row in v and row in rows and v[row]["trials"]:
                # the virtual process without drift, for the same comparison
                nodrift = run_row("new", row, replace(vm, slow_mean_s=1e-9, normal_mean_s=1e12, round_sigma=0.0),
                                  gate, 200, args.seed + 1, shared_rounds=True)
                k = round(v[row]["rejected"] * v[row]["trials"])
                v[row]["virtual_without_drift_rejected"] = nodrift["rejected"]
                v[row]["virtual_without_drift_headline_sd"] = nodrift.get("headline_sd")
                v[row]["binomial_p_value"] = binom_p_two_sided(k, v[row]["trials"], nodrift["rejected"])
        out["validation_over_http"] = v
        print(json.dumps(v, indent=1))
    print(table(rows))
    if args.out != "-":
        path = RESULTS / f"{args.out}.json"
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
