"""bench/gate_error_rates.py's pilot/confirm rule knobs (issue 56, item 6: the rule re-chosen by measurement): each
of the three numbers of ``raylift.release.decision`` it takes is honoured by the simulated gate, and a rule that
cannot be one is refused naming the knobs. Run as the lead runs it (a child Python): tests never import bench/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gate_error_rates.py"
pytestmark = pytest.mark.component  # a child Python


def _confirmed_share(*rule: str) -> float:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--rows", "unchanged", "--processes", "confirm", "--trials", "40", "--out", "-",
         *rule], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("unchanged") and "confirm:" in x)
    return float(json.loads(line.split("confirm:", 1)[1].rsplit("(", 1)[0])["confirmed_share"])


def test_the_confirmation_band_is_the_one_given() -> None:
    every_slower_pilot = _confirmed_share("--confirm-above", "0", "--pilot-decides-above", "1")
    none = _confirmed_share("--confirm-above", "0.8", "--pilot-decides-above", "0.9")
    # an unchanged pilot reads slower about half the time: all of those are measured again, or none
    assert 0.25 < every_slower_pilot < 0.75 and none == 0.0, (every_slower_pilot, none)


def test_a_rule_that_cannot_be_one_is_refused() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--confirm-above", "0.3", "--out", "-"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and "--confirm-above < --pilot-decides-above" in done.stderr, done.stderr[-1000:]
