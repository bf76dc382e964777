"""Fit the gate simulation's noise model to real replicas, and the real runs' own sequence figures (issue 45).

Reads a ``bench/gate_real_aa.py`` run: ``--source bench/results/gate_real_aa_session31.json`` (the default, what
``gate_calibration.json`` was fitted on) and its samples beside it, ``..._samples.json.gz`` (per
release three arms measured in the same rounds: ``candidate`` (the canary), ``serving`` (the serving app under a
live client) and ``fresh`` (a fresh replica of the serving config)). On the log of e2e latency (the headline's
metric), per level:

- **request spread**: the within-round standard deviation of log TTFT and log TPOT (the simulation's
  ``sigma``), and their medians (``ttft_ms``, ``itl_ms``) on the fresh arm at concurrency 1;
- **round effect**: the spread of an arm's round medians beyond what the request spread gives a median of that
  many requests (``round_sigma``), and the share of it the arms have in common (``round_shared``: the
  covariance of two arms' round deviations over the variance);
- **per-replica effect**: same-speed releases' candidate-vs-fresh differences vary from release to release by
  more than their own rounds say: that excess is two fresh replicas' effects (``replica_sigma``);
- **live traffic**: the serving arm against the fresh one, mean (``serving_shift``) and spread beyond sampling and
  one replica's effect (``serving_sigma``).

A run of issue 56's harness measured each paired release both ways on the same replicas (``interleaved``: each arm
alone, RMIT; ``concurrent``: at once) and has no serving arm; ``--design`` picks which design's samples are fitted
(:func:`design_releases`): the interleaved design's round effect is fitted with the arms' rounds apart (what they
share of it is measured, not assumed), and the results go to ``gate_calibration_interleaved.json``.

Then the sequence figures of the real runs as they are: consecutive same-speed releases in fives, each design's
own decisions chained as ``raylift.release`` chains them. Writes ``bench/results/gate_calibration.json``, which
``bench/gate_error_rates.py --calibrated`` reads.

    .cache/venvs/control/bin/python bench/gate_calibration.py
"""

from __future__ import annotations

import gzip
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))

from raylift.release.decision import compound  # noqa: E402

RESULTS = ROOT / "bench/results"


def rounds(level: dict[str, Any], metric: str) -> list[np.ndarray]:
    s = level["samples"]
    values, sizes = s[metric], s["round_sizes"][metric]
    out, k = [], 0
    for n in sizes:
        x = np.asarray(values[k:k + n], dtype=float)
        out.append(np.log(x[x > 0]))  # an answer streamed in one chunk has no time per output token (0): not a sample
        k += n
    return out


DESIGNS = ("concurrent", "interleaved")


def design_releases(samples: list[dict[str, Any]], design: str) -> list[dict[str, Any]]:
    """The releases as :func:`fit` reads them (arms ``candidate``, ``fresh`` and, when measured, ``serving``): a
    session-31-style line as it is (its arms were measured at once: ``concurrent``), an issue-56 paired line's
    ``design`` measurement with its ``baseline`` (a fresh replica of the anchor's config) as ``fresh``."""
    if design not in DESIGNS:
        raise ValueError(f"design {design!r} is not one of {list(DESIGNS)}")
    out = []
    for line in samples:
        if any(d in line for d in DESIGNS):
            if design in line:
                out.append({"kind": line["kind"], "candidate": line[design]["candidate"],
                            "fresh": line[design]["baseline"]})
        elif design == "concurrent":
            out.append(line)
    if not out:
        raise ValueError(f"no release measured with the {design} design in these samples")
    return out


def fit(releases: list[dict[str, Any]]) -> dict[str, Any]:
    same = [r for r in releases if r["kind"] in ("copy", "seed")]
    levels = [lv["concurrency"] for lv in same[0]["fresh"]]
    with_serving = all("serving" in r for r in same)
    per_level: dict[str, Any] = {}
    for li, c in enumerate(levels):
        within_sd, round_excess, shared, d_cf, w_cf, d_sf, w_sf = [], [], [], [], [], [], []
        for r in same:
            arms = {a: rounds(r[a][li], "e2e_ms") for a in ("candidate", "serving", "fresh") if a in r}
            med = {a: np.array([np.median(x) for x in arms[a]]) for a in arms}
            for a in arms:
                sd = statistics.fmean(float(np.std(x, ddof=1)) for x in arms[a] if len(x) > 1)
                within_sd.append(sd)
                n = statistics.fmean(len(x) for x in arms[a])
                sampling = (math.pi / 2) * sd ** 2 / n  # variance of a median of n
                round_excess.append(float(np.var(med[a], ddof=1)) - sampling)
            dev = {a: med[a] - med[a].mean() for a in med}
            var = statistics.fmean(float(np.var(med[a], ddof=1)) for a in ("candidate", "fresh"))
            if var > 0:
                shared.append(float(np.sum(dev["candidate"] * dev["fresh"]) / (len(dev["fresh"]) - 1)) / var)
            m = {a: float(np.median(np.concatenate(arms[a]))) for a in arms}
            d_cf.append(m["candidate"] - m["fresh"])
            w_cf.append(float(np.var(med["candidate"] - med["fresh"], ddof=1)) / len(med["fresh"]))
            if with_serving:
                d_sf.append(m["serving"] - m["fresh"])
                w_sf.append(float(np.var(med["serving"] - med["fresh"], ddof=1)) / len(med["fresh"]))
        var_cf = float(np.var(d_cf, ddof=1))
        replica_var = max(0.0, (var_cf - statistics.fmean(w_cf)) / 2)
        var_sf = float(np.var(d_sf, ddof=1)) if len(d_sf) > 1 else math.nan
        per_level[str(c)] = {
            "request_log_sd_e2e": statistics.fmean(within_sd),
            "round_sigma": math.sqrt(max(0.0, statistics.fmean(round_excess))),
            "round_shared": min(1.0, max(0.0, statistics.fmean(shared))) if shared else None,
            "candidate_vs_fresh_log_sd": math.sqrt(var_cf), "candidate_vs_fresh_within_sd": math.sqrt(statistics.fmean(w_cf)),
            "replica_sigma": math.sqrt(replica_var),
            **({"serving_shift": statistics.fmean(d_sf), "serving_vs_fresh_log_sd": math.sqrt(var_sf),
                "serving_sigma": math.sqrt(max(0.0, var_sf - statistics.fmean(w_sf) - replica_var))}
               if with_serving else {"serving_shift": None, "serving_vs_fresh_log_sd": None, "serving_sigma": None}),
        }
    c1 = 0
    ttft = np.concatenate([np.asarray(r["fresh"][c1]["samples"]["ttft_ms"], float) for r in same])
    tpot = np.concatenate([np.asarray(r["fresh"][c1]["samples"]["tpot_ms"], float) for r in same])
    tpot = tpot[tpot > 0]  # an answer streamed in one chunk has no time per output token: not a sample
    # The request spread of each arm and metric, from its rounds of two or more samples. In sessions 41-42's runs the
    # tiny model's answers (~16 tokens in ~20 ms) mostly reached the client in one streamed chunk (e2e = TTFT, TPOT
    # 0): then TPOT has no such round, and it is left out (named).
    spreads: dict[str, float] = {}
    for a in ("fresh", "candidate"):
        for m in ("ttft_ms", "tpot_ms"):
            sds = [float(np.std(x, ddof=1)) for r in same for x in rounds(r[a][c1], m) if len(x) > 1]
            if sds:
                spreads[f"{a} {m}"] = statistics.fmean(sds)
    if not spreads or tpot.size == 0:
        raise ValueError("no round of these samples holds two or more TTFT and TPOT samples at the first level: "
                         "nothing to fit the request spread on (answers streamed in one chunk have no TPOT); "
                         "measure with longer answers or add a run that has them (--source takes several)")
    sig = list(spreads.values())

    def avg(key: str) -> float | None:
        vals = [v[key] for v in per_level.values() if v[key] is not None]
        return float(statistics.fmean(vals)) if vals else None

    machine = {"ttft_ms": float(np.median(ttft)), "itl_ms": float(np.median(tpot)), "sigma": float(statistics.fmean(sig)),
               "round_sigma": avg("round_sigma"), "round_shared": avg("round_shared"),
               "replica_sigma": avg("replica_sigma"), "serving_shift": avg("serving_shift"),
               "serving_sigma": avg("serving_sigma")}
    machine = {k: v for k, v in machine.items() if v is not None}  # no serving arm: the simulation's own
    return {"machine": machine, "per_level": per_level, "same_speed_releases": len(same),
            "request_spread_from": sorted(spreads), "tpot_samples": int(tpot.size)}


def sequences(rows: list[dict[str, Any]], limit: float) -> dict[str, Any]:
    """Consecutive same-speed releases in fives, each design's decisions chained as raylift.release does: a
    roll back stops the sequence; a promote adds its headline to the chain (against the serving app) or is the
    whole change since the anchor (against a fresh replica of the anchor's config: the harness never promotes,
    so the serving config stays the anchor's)."""
    same = [r for r in rows if r["kind"] in ("copy", "seed")]
    out: dict[str, Any] = {}
    for design in ("vs_serving", "vs_fresh"):
        stopped = []
        for k in range(0, len(same) - 4, 5):
            links: list[float] = []
            stop = None
            for j, r in enumerate(same[k:k + 5], start=1):
                d = r[design]
                if d["action"] != "promote":
                    stop = j
                    break
                h = d["headline_change"]
                if design == "vs_serving" and h is not None:
                    if compound([*links, h]) > limit:  # the chain a scheduled run would carry
                        stop = j
                        break
                    links.append(h)
            stopped.append(stop)
        out[design] = {"sequences_of_five": len(stopped), "stopped": sum(s is not None for s in stopped),
                       "stopped_at": stopped}
    return out


def match_request_sigma(machine: dict[str, Any], real_e2e_sd: float) -> float:
    """The per-request sigma (of TTFT and of TPOT, as the simulation draws them) whose e2e has the real runs'
    within-round log spread: the TPOT of few-token answers spreads far more than their e2e."""
    from raylift.measure.profiles import generate_requests, get_profile

    n = np.asarray([s.output_tokens for s in generate_requests(get_profile("smoke"), 2000, seed_offset=1)], float)
    rng = np.random.default_rng(45)
    best, best_gap = 0.0, math.inf
    for sigma in np.arange(0.05, 1.0, 0.01):
        e2e = (machine["ttft_ms"] * rng.lognormal(0, sigma, n.size)
               + machine["itl_ms"] * rng.lognormal(0, sigma, n.size) * (n - 1))
        gap = abs(float(np.std(np.log(e2e))) - real_e2e_sd)
        if gap < best_gap:
            best, best_gap = float(sigma), gap
    return round(best, 3)


def match_round_sigma(machine: dict[str, Any], real_sd: float, trials: int = 150, *,
                      shared_rounds: bool = True) -> tuple[float, list[Any]]:
    """The round effect that gives the simulation's same-speed headline (canary vs a fresh replica) the real
    runs' spread, the other fitted parts held. Why: the round medians' own spread overstates it at concurrency 4,
    where the requests of a wave share the engine's batches (they are not independent samples)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from dataclasses import replace

    from gate_error_rates import Gate, Machine, run_row

    grid = []
    for rs in (0.0, 0.02, 0.04, 0.06, 0.08, 0.10, 0.12, 0.15):
        m = replace(Machine(), **{**machine, "round_sigma": rs})
        sd = run_row("kayenta", "unchanged", m, Gate(), trials, 45, shared_rounds=shared_rounds)["headline_sd"]
        grid.append([rs, round(sd, 4)])
    best = min(grid, key=lambda g: abs(g[1] - real_sd))
    return float(best[0]), grid


def main() -> int:
    import argparse

    from gate_real_aa import samples_path  # one naming of a run's samples, the writer's (bench/: this folder)

    from raylift.config import DEFAULT_MAX_CUMULATIVE_REGRESSION

    ap = argparse.ArgumentParser()
    ap.add_argument("--source", type=Path, default=RESULTS / "gate_real_aa_session31.json",
                    help="a gate_real_aa.py run's results JSON (its samples beside it, as that script writes them), "
                         "or a pooled one (--summarize: each pooled run's samples beside it)")
    ap.add_argument("--design", choices=DESIGNS, default="concurrent",
                    help="whose samples to fit: the arms measured at once (session 31's, the default) or each alone "
                         "(interleaved: an issue-56 run's paired releases)")
    ap.add_argument("--match-trials", type=int, default=150,
                    help="simulated releases per round-effect grid point when matching the real headline spread")
    ap.add_argument("--out", type=Path, default=None,
                    help="where to write (default: results/gate_calibration.json, or _<design>.json)")
    args = ap.parse_args()
    source, design = args.source, args.design
    real = json.loads(source.read_text())
    # a pooled summary (gate_real_aa.py --summarize) keeps no samples of its own: each run's lie beside its results
    runs = [source.with_name(name) for name in real.get("pooled_from", [])] or [source]
    samples_at = [samples_path(run) for run in runs]
    try:
        samples = design_releases([json.loads(line) for at in samples_at for line in gzip.open(at, "rt")], design)
        fitted = fit(samples)
    except ValueError as exc:  # what the samples cannot give, said as such (not a traceback)
        raise SystemExit(f"{source.name}: {exc}") from None
    paired = real["summary"].get("paired")
    real_sd = (paired[design]["same_speed_headline_sd"] if paired
               else real["summary"]["vs_fresh"]["same_speed_headline_sd"])
    if real_sd is None:
        raise SystemExit(f"{source.name} has fewer than two same-speed releases measured with the {design} design: "
                         "no headline spread to match; pass a run with more, or the pooled gate_real_aa.json")
    real_e2e_sd = statistics.fmean(v["request_log_sd_e2e"] for v in fitted["per_level"].values())
    fitted["sigma_from_ttft_and_tpot"] = fitted["machine"]["sigma"]
    fitted["machine"]["sigma"] = match_request_sigma(fitted["machine"], real_e2e_sd)
    rs, grid = match_round_sigma(fitted["machine"], real_sd, args.match_trials, shared_rounds=design == "concurrent")
    fitted["round_sigma_from_round_medians"] = fitted["machine"]["round_sigma"]
    fitted["machine"]["round_sigma"] = rs
    heads = real.get("runs") or [real]
    out = {"source": {"samples": [str(at.relative_to(ROOT) if at.is_relative_to(ROOT) else at) for at in samples_at],
                      "date": [h["date"] for h in heads], "commit": [h["commit"] for h in heads],
                      "releases": len(samples)},
           "design": design,
           **fitted, "round_sigma_matched": {"real_same_speed_headline_sd": real_sd, "grid": grid},
           **({"real_sequences": sequences(real["releases"], DEFAULT_MAX_CUMULATIVE_REGRESSION)}
              if all("vs_fresh" in r for r in real["releases"]) else {})}
    name = "gate_calibration.json" if design == "concurrent" else f"gate_calibration_{design}.json"
    (args.out or RESULTS / name).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
