"""bench/gate_real_aa.py without a stack: it imports, parses its knobs (``--releases N`` in issue 56's mix), plans
the releases, and writes its results file; its summary, recomputed from a run's rows (``--summarize``), gives each
target with its exact binomial interval and names the releases the gate did not decide with their spread. Run as
the lead runs it (a child Python): tests never import bench/ (tests/test_layers.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import binomtest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gate_real_aa.py"
pytestmark = pytest.mark.component  # a child Python


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_a_short_run_is_planned_in_the_issues_mix_and_written(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    done = _run("--releases", "5", "--plan-only", "--out", str(out))
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert sorted(written["plan"]) == ["blue_green", "copy", "copy", "seed", "slower"]
    assert (written["args"]["same"], written["args"]["slow"], written["args"]["blue_green"]) == (3, 1, 1)
    assert written["args"]["workers"] == 0  # make demo's shape: one node
    full = _run("--plan-only", "--out", str(out))
    plan = json.loads(out.read_text())["plan"]
    assert full.returncode == 0 and len(plan) == 50
    assert (plan.count("copy") + plan.count("seed"), plan.count("slower"), plan.count("blue_green")) == (30, 10, 10)
    assert not out.with_name(out.name + ".tmp").exists()  # written whole, then renamed
    odd = _run("--releases", "7", "--plan-only", "--out", str(out))  # 4.2 : 1.4 : 1.4, the remainder same-speed
    assert odd.returncode == 0 and len(json.loads(out.read_text())["plan"]) == 7


def test_bad_counts_are_refused_naming_the_knob(tmp_path: Path) -> None:
    done = _run("--releases", "0", "--plan-only", "--out", str(tmp_path / "x.json"))
    assert done.returncode != 0 and "--releases must be at least 1" in done.stderr
    done = _run("--slow", "-1", "--plan-only", "--out", str(tmp_path / "x.json"))
    assert done.returncode != 0 and "release counts must be 0 or more" in done.stderr


def _row(i: int, kind: str, action: str, verdict: str, spread: float | None = None) -> dict[str, Any]:
    return {"i": i, "kind": kind, "action": action, "verdict": verdict, "headline_change": 0.01 * i,
            "aa_spread": spread, "aa_source": "learned from this app's last 4 same-config canaries (A/A)",
            "baseline_runs": "fresh-anchor", "design": {"name": "interleaved"}}


def test_the_summary_gives_exact_intervals_and_names_the_undecided(tmp_path: Path) -> None:
    rows = ([_row(i, "copy", "promote", "pass") for i in range(8)]
            + [_row(8, "seed", "roll_back", "regressed"),
               _row(9, "seed", "promote", "inconclusive", spread=0.129)]
            + [_row(10 + i, "slower", "roll_back", "regressed") for i in range(3)]
            + [_row(13, "slower", "promote", "pass")])
    rows[0]["paired"] = {"kind": "copy", "interleaved": {"action": "promote", "headline_change": 0.02},
                         "concurrent": {"action": "roll_back", "headline_change": 0.3}}
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"releases": rows, "summary": {}}))
    out = tmp_path / "again.json"
    done = _run("--summarize", str(run), "--out", str(out))
    assert done.returncode == 0, done.stderr
    summary = json.loads(out.read_text())["summary"]
    same = summary["same_speed"]
    assert (same["rejected"], same["releases"]) == (1, 10)
    exact = binomtest(1, 10).proportion_ci(0.95, method="exact")
    assert same["interval_95"] == pytest.approx([exact.low, exact.high])
    slower = summary["slower"]
    assert (slower["rejected"], slower["releases"]) == (3, 4)
    assert summary["decided"] == 13
    assert summary["decided_wrongly"] == {"same_speed_rolled_back": 1, "slower_promoted_as_pass": 1}
    (undecided,) = summary["undecided"]
    assert undecided["i"] == 9 and undecided["aa_spread"] == 0.129 and "last 4" in undecided["aa_source"]
    paired = summary["paired"]
    assert paired["interleaved"]["same_speed"]["rejected"] == 0
    assert paired["concurrent"]["same_speed"]["rejected"] == 1


def test_runs_of_several_sessions_are_pooled_each_release_tagged_with_its_run(tmp_path: Path) -> None:
    """Issue 56 asks for 50 releases (about 2.5 h of this machine): they are gathered over sessions, one stack each,
    and pooled here. The summary is over every release; each keeps its run and its number there."""
    first = tmp_path / "gate_real_aa_s40.json"
    first.write_text(json.dumps({"date": "d1", "commit": "c1", "client": {"sent": 700, "failed": 0},
                                 "releases": [_row(0, "copy", "promote", "inconclusive", spread=0.02),
                                              _row(1, "slower", "roll_back", "regressed")]}))
    second = tmp_path / "gate_real_aa_s41.json"
    second.write_text(json.dumps({"date": "d2", "commit": "c2", "client": {"sent": 900, "failed": 1},
                                  "releases": [_row(0, "seed", "roll_back", "regressed"),
                                               _row(1, "slower", "promote", "pass"),
                                               _row(2, "blue_green", "promote", "inconclusive", spread=0.04)]}))
    out = tmp_path / "pooled.json"
    done = _run("--summarize", str(first), str(second), "--out", str(out))
    assert done.returncode == 0, done.stderr
    pooled = json.loads(out.read_text())
    assert [(r["i"], r["run"], r["run_i"]) for r in pooled["releases"]] == [
        (0, first.name, 0), (1, first.name, 1), (2, second.name, 0), (3, second.name, 1), (4, second.name, 2)]
    summary = pooled["summary"]
    assert (summary["same_speed"]["rejected"], summary["same_speed"]["releases"]) == (1, 2)
    assert (summary["slower"]["rejected"], summary["slower"]["releases"]) == (1, 2)
    assert summary["blue_green_aa"]["releases"] == 1
    assert summary["decided_wrongly"] == {"same_speed_rolled_back": 1, "slower_promoted_as_pass": 1}
    assert [u["i"] for u in summary["undecided"]] == [0, 4]  # numbered in the pool
    assert [r["commit"] for r in pooled["runs"]] == ["c1", "c2"] and pooled["client"] == {"sent": 1600, "failed": 1}
