"""bench/gate_calibration.py on issue 56's paired runs (issue 56, item 6: the refit on the new real samples): it
reads a pooled ``gate_real_aa.py --summarize`` file (each pooled run's samples beside it), fits the request spread
from the rounds that have two or more samples of a metric, leaves out a metric no round has (sessions 41-42's tiny
model answers mostly reached the client in one streamed chunk: e2e = TTFT, TPOT 0) and refuses, naming the cause,
what it cannot fit. Run as the lead runs it (a child Python): tests never import bench/ (tests/test_layers.py)."""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gate_calibration.py"
pytestmark = pytest.mark.component  # a child Python

ROUNDS, PER_ROUND = 8, 16


def _level(rng: np.random.Generator, concurrency: int, ttft_ms: float, one_chunk: bool) -> dict[str, Any]:
    n = ROUNDS * PER_ROUND
    ttft = ttft_ms * rng.lognormal(0, 0.2, n)
    tpot = np.zeros(n) if one_chunk else 1.3 * rng.lognormal(0, 0.2, n)
    e2e = ttft + tpot * 15
    sizes = [PER_ROUND] * ROUNDS
    return {"concurrency": concurrency, "rounds": ROUNDS, "requests": n, "errors": 0,
            "samples": {"ok": n, "errors": 0, "ttft_ms": ttft.round(3).tolist(), "tpot_ms": tpot.round(4).tolist(),
                        "e2e_ms": e2e.round(3).tolist(),
                        "round_sizes": {m: sizes for m in ("ttft_ms", "tpot_ms", "e2e_ms")}}}


def _run_files(folder: Path, name: str, *, one_chunk: bool, seed: int, kinds: list[str]) -> Path:
    """One gate_real_aa.py run as it leaves it: its samples (paired lines, both designs) beside a results file whose
    rows carry each paired release's headline; the summary is gate_real_aa.py's own (``--summarize`` in place)."""
    rng = np.random.default_rng(seed)
    rows = []
    with gzip.open(folder / f"{name}_samples.json.gz", "wt") as f:
        for i, kind in enumerate(kinds):
            line: dict[str, Any] = {"i": i, "kind": kind}
            slow = 1.2 if kind == "slower" else 1.0
            for design in ("interleaved", "concurrent"):
                line[design] = {arm: [_level(rng, c, 28.0 * (slow if arm == "candidate" else 1.0), one_chunk)
                                      for c in (1, 4)] for arm in ("candidate", "baseline")}
            f.write(json.dumps(line) + "\n")
            head = {d: {"action": "promote", "headline_change": round(slow - 1 + 0.01 * (i + seed) * (-1) ** i, 4)}
                    for d in ("interleaved", "concurrent")}
            rows.append({"i": i, "kind": kind, "action": "promote", "verdict": "inconclusive",
                         "headline_change": head["interleaved"]["headline_change"], "paired": {"kind": kind, **head}})
    run = folder / f"{name}.json"
    run.write_text(json.dumps({"date": f"2026-12-07T0{seed}:00:00+00:00", "commit": f"c{seed}", "releases": rows}))
    _summarize([run], run)
    return run


def _summarize(runs: list[Path], out: Path) -> dict[str, Any]:
    """gate_real_aa.py --summarize: the writer of every results file gate_calibration.py reads."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gate_real_aa.py"), "--summarize", *map(str, runs),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    written: dict[str, Any] = json.loads(out.read_text())
    return written


def _calibrate(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--source", str(source), "--design", "interleaved", "--match-trials", "2",
         "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_a_pooled_run_is_fitted_on_every_runs_samples_and_one_chunk_answers_leave_tpot_out(tmp_path: Path) -> None:
    kinds = ["copy", "seed", "copy", "slower"]
    runs = [_run_files(tmp_path, "run_a", one_chunk=False, seed=1, kinds=kinds),
            _run_files(tmp_path, "run_b", one_chunk=True, seed=2, kinds=kinds)]
    pooled = _summarize(runs, tmp_path / "pooled.json")
    assert pooled["pooled_from"] == ["run_a.json", "run_b.json"]  # no samples of its own: each run's beside it
    out = tmp_path / "calibration.json"
    done = _calibrate(tmp_path / "pooled.json", out)
    assert done.returncode == 0, done.stderr[-3000:]
    fitted = json.loads(out.read_text())
    assert fitted["design"] == "interleaved" and fitted["source"]["releases"] == 8  # both runs' paired lines
    assert fitted["source"]["commit"] == ["c1", "c2"]
    assert fitted["same_speed_releases"] == 6  # copy, seed, copy of each run; the slower ones are not fitted
    # TPOT only where answers came in more than one chunk: run_a's fresh arm, 128 samples at concurrency 1
    assert fitted["tpot_samples"] == 3 * ROUNDS * PER_ROUND
    assert fitted["request_spread_from"] == ["candidate tpot_ms", "candidate ttft_ms", "fresh tpot_ms", "fresh ttft_ms"]
    assert abs(fitted["machine"]["itl_ms"] - 1.3) < 0.1 and abs(fitted["machine"]["ttft_ms"] - 28.0) < 2.0
    # the spread matched is the pooled same-speed headlines' (sample SD), as gate_real_aa.py summarised them
    heads = [r["paired"]["interleaved"]["headline_change"] for r in pooled["releases"] if r["kind"] != "slower"]
    assert fitted["round_sigma_matched"]["real_same_speed_headline_sd"] == pytest.approx(statistics.stdev(heads))


def test_what_cannot_be_fitted_is_refused_naming_why(tmp_path: Path) -> None:
    run = _run_files(tmp_path, "only_one_chunk", one_chunk=True, seed=3, kinds=["copy", "seed", "slower"])
    done = _calibrate(run, tmp_path / "x.json")
    assert done.returncode != 0 and "answers streamed in one chunk have no TPOT" in done.stderr, done.stderr[-2000:]
    run = _run_files(tmp_path, "one_release", one_chunk=False, seed=4, kinds=["copy", "slower"])
    done = _calibrate(run, tmp_path / "x.json")
    assert done.returncode != 0 and "fewer than two same-speed releases" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "x.json").exists()
