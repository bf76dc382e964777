"""raylift.release.measured: how a release's arms are measured is chosen in one place from where they run, and the
app's A/A log is what the gate learns its noise from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raylift.measure.runner import CONCURRENT, INTERLEAVED
from raylift.release.canary import CanaryPlan
from raylift.release.decision import AA_MIN_SAMPLES
from raylift.release.measured import aa_headline, learn_noise, measurement_design, noise_evidence
from raylift.release.state import DeploymentState
from raylift.serve.config import config_hash
from raylift.store import LocalStore


def _placed(cand: list[str], base: list[str]) -> dict[str, Any]:
    return {"candidate": {"app": "llm-canary", "nodes": cand, "neighbours": 0},
            "baseline": {"app": "llm-baseline", "nodes": base, "neighbours": 0}}


@pytest.mark.parametrize("placement, release, share, design, why", [
    (_placed(["n1"], ["n2"]), "canary", False, CONCURRENT, "distinct Ray nodes"),
    (_placed(["n1"], ["n1"]), "canary", False, INTERLEAVED, "share Ray node(s) n1"),
    (_placed(["n1", "n2"], ["n2"]), "canary", False, INTERLEAVED, "share Ray node(s) n2"),
    # local: Ray's nodes are process groups on one machine, distinct node ids or not
    (_placed(["n1"], ["n2"]), "canary", True, INTERLEAVED, "one machine"),
    ({"note": "no running replica of 'llm-canary'"}, "canary", False, INTERLEAVED, "not known"),
    ({"note": "the arms run on accelerators", "accelerators": True}, "canary", True, CONCURRENT, "devices"),
    ({"note": "blue/green: each arm on its own cluster"}, "blue_green", True, INTERLEAVED, "both clusters"),
    ({"note": "blue/green: each arm on its own cluster"}, "blue_green", False, CONCURRENT, "own cluster"),
])
def test_the_design_follows_where_the_arms_run(placement: dict[str, Any], release: str, share: bool, design: str,
                                               why: str) -> None:
    chosen = measurement_design(placement, release=release, arms_share_host=share)
    assert chosen["name"] == design and why in chosen["why"], chosen


def _arm(e2e_ms: float) -> dict[str, Any]:
    """A benchmark result of one level whose 64 e2e samples are ``e2e_ms`` times a fixed spread."""
    values = [e2e_ms * (0.9 + 0.2 * i / 63) for i in range(64)]
    return {"started_at": "2026-12-07T05:00:00+00:00", "design": {"name": INTERLEAVED},
            "levels": [{"concurrency": 1, "requests": 64, "errors": 0, "cancelled": 0, "error_rate": 0.0,
                        "samples": {"ok": 64, "errors": 0, "e2e_ms": values, "ttft_ms": [], "tpot_ms": [],
                                    "output_tokens_per_s": []}}],
            "overall": {"error_rate": 0.0}}


def _plan(candidate: dict[str, Any], source: dict[str, Any]) -> CanaryPlan:
    return CanaryPlan(app_name="llm", candidate=candidate, canary={"name": "llm-canary"}, serving=source,
                      serving_before=source, lent=0, baseline_scale=1, baseline={"name": "llm-baseline"},
                      baseline_runs="fresh-anchor", baseline_source=config_hash(source))


def test_each_release_adds_its_aas_to_the_log_and_the_spread_is_learned_from_it(tmp_path: Path) -> None:
    state = DeploymentState(LocalStore(tmp_path), "local", "llm")
    app = {"name": "llm", "args": {"model": "/store/a"}}
    other = {"name": "llm", "args": {"model": "/store/b"}}
    assert noise_evidence(state)["aa_spread"] is None  # nothing learned yet
    # a canary of another config, measured without an in-release A/A (concurrent): nothing to learn
    learned = learn_noise(state, "r0", _plan(other, app), _arm(110), _arm(100))
    assert learned["aa_spread"] is None and learned["headlines"] == []
    # an in-release A/A (the baseline measured again: +10 %) and a canary of the anchor's own config (-10 %)
    learned = learn_noise(state, "r1", _plan(app, app), {**_arm(90), "aa": {"headline_change": 0.1}}, _arm(100))
    assert sorted(round(h, 2) for h in learned["headlines"]) == [-0.1, 0.1]
    assert learned["aa_spread"] is None  # two are not enough to believe a spread
    learned = learn_noise(state, "r2", _plan(other, app), {**_arm(150), "aa": {"headline_change": -0.1}}, _arm(100))
    assert len(learned["headlines"]) == AA_MIN_SAMPLES and learned["aa_spread"] == pytest.approx(0.1, abs=0.01)
    assert "last 3 A/A measurements" in learned["source"]
    assert learned["this_release"] == {"in-release": -0.1}  # the 50 % slower canary of another config is no A/A
    assert aa_headline(_arm(110), _arm(100)) == pytest.approx(0.1, abs=0.01)
