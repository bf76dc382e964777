"""raylift.release: every rule of the release decision, the headline, the anchor chain, and bad input."""

from __future__ import annotations

from typing import Any

import pytest

from raylift.errors import RayliftValueError
from raylift.release.decision import (
    HOLD,
    PROMOTE,
    ROLL_BACK,
    ReleaseDecision,
    ReleaseEvidence,
    decide,
    headline_change,
    next_anchor_links,
)


def _m(metric: str, c: int, verdict: str, change: float, half: float = 0.1) -> dict[str, Any]:
    return {"metric": metric, "concurrency": c, "verdict": verdict, "change": change, "low": change - half,
            "high": change + half, "baseline_median": 100.0, "new_median": 100.0 * (1 + change)}


def judgement(verdict: str, e2e: float = 0.0, note: str = "") -> dict[str, Any]:
    """A judgement dict whose e2e changes at both levels are ``e2e`` (so the headline is ``e2e``)."""
    return {"verdict": verdict, "confidence": 0.95, "tolerance": 0.10, "note": note, "needed_requests": 200,
            "metrics": [_m("ttft_ms", 1, verdict, e2e), _m("e2e_ms", 1, verdict, e2e),
                        _m("e2e_ms", 4, verdict, e2e)]}


def ev(**kw: Any) -> ReleaseEvidence:
    base: dict[str, Any] = {"first_deploy": False, "smoke_passed": True, "slo_violations": (),
                            "judgement": judgement("pass", 0.01)}
    return ReleaseEvidence(**{**base, **kw})


# (id, evidence, action, verdict, becomes_anchor, a phrase the reasons must hold)
CASES = [
    ("first deploy promotes and anchors", ev(first_deploy=True, judgement=None), PROMOTE, "new baseline", True,
     "first deploy"),
    ("first deploy, smoke failed", ev(first_deploy=True, smoke_passed=False, judgement=None), ROLL_BACK,
     "smoke failed", False, "smoke"),
    ("first deploy, SLO broken", ev(first_deploy=True, slo_violations=("ttft_ms.p99 = 900, SLO limit 500",),
                                    judgement=None), ROLL_BACK, "slo violated", False, "900"),
    ("smoke failed", ev(smoke_passed=False), ROLL_BACK, "smoke failed", False, "smoke"),
    ("SLO violation beats a pass", ev(slo_violations=("error_rate = 0.05, SLO limit 0",)), ROLL_BACK,
     "slo violated", False, "error_rate = 0.05"),
    ("judgement failed is no pass", ev(judgement={**judgement("failed"), "metrics": []}), ROLL_BACK, "failed",
     False, "no verdict is no pass"),
    ("unknown verdict rolls back", ev(judgement=judgement("weird")), ROLL_BACK, "failed", False, "'weird'"),
    ("regressed", ev(judgement=judgement("regressed", 0.4)), ROLL_BACK, "regressed", False, "+40.0%"),
    ("regressed beats approval", ev(judgement=judgement("regressed", 0.4), approval="approve"), ROLL_BACK,
     "regressed", False, "regressed"),
    ("pass promotes and anchors", ev(), PROMOTE, "pass", True, "+1.0%"),
    ("pass over the cumulative limit rolls back",
     ev(judgement=judgement("pass", 0.04), anchor_links=(0.05, 0.03)), ROLL_BACK, "cumulative regression",
     False, "+12.5%"),
    ("one release alone over the limit", ev(judgement=judgement("inconclusive", 0.12)), ROLL_BACK,
     "cumulative regression", False, "+12.0%"),
    ("limit is a parameter", ev(judgement=judgement("inconclusive", 0.12), max_cumulative_regression=0.2,
                                on_inconclusive="pass"), PROMOTE, "inconclusive", False, "'pass'"),
    ("cumulative limit beats approval",
     ev(judgement=judgement("inconclusive", 0.06), anchor_links=(0.06,), approval="approve"), ROLL_BACK,
     "cumulative regression", False, "+6.0%"),
    ("speed-ups in the chain offset", ev(judgement=judgement("inconclusive", 0.08), anchor_links=(-0.05,),
                                         on_inconclusive="pass"), PROMOTE, "inconclusive", False, "+2.6%"),
    ("inconclusive promotes by default, not as the anchor", ev(judgement=judgement("inconclusive", 0.05)), PROMOTE,
     "inconclusive", False, "+5.0%"),
    ("inconclusive holds", ev(judgement=judgement("inconclusive", 0.05), on_inconclusive="hold"), HOLD,
     "inconclusive", False, "waiting"),
    ("inconclusive hold approved", ev(judgement=judgement("inconclusive", 0.05), on_inconclusive="hold",
                                      approval="approve"), PROMOTE, "inconclusive", False, "approved"),
    ("inconclusive hold rejected", ev(judgement=judgement("inconclusive", 0.05), on_inconclusive="hold",
                                      approval="reject"), ROLL_BACK, "inconclusive", False, "rejected"),
    ("inconclusive pass", ev(judgement=judgement("inconclusive", 0.05), on_inconclusive="pass"), PROMOTE,
     "inconclusive", False, "'pass'"),
    ("inconclusive fail", ev(judgement=judgement("inconclusive", 0.05), on_inconclusive="fail"), ROLL_BACK,
     "inconclusive", False, "'fail'"),
    ("approval ignored when the policy is pass",
     ev(judgement=judgement("inconclusive", 0.05), on_inconclusive="pass", approval="reject"), PROMOTE,
     "inconclusive", False, "'pass'"),
    # no bypass (issue 45 item 2): nothing comparable with the anchor starts no new anchor by itself, whatever
    # on_inconclusive says (before: "pass" promoted a 3x slower direct release on its SLOs alone)
    ("new baseline outside a first deploy rolls back",
     ev(judgement={**judgement("new baseline", note="the benchmark profile changed"), "metrics": []},
        on_inconclusive="hold"), ROLL_BACK, "failed", False, "the benchmark profile changed"),
    ("new baseline outside a first deploy, policy pass, still rolls back",
     ev(judgement={**judgement("new baseline"), "metrics": []}, on_inconclusive="pass"), ROLL_BACK, "failed",
     False, "regression_baseline 'none'"),
    ("new anchor asked: promoted as the anchor, naming who asked",
     ev(judgement=None, anchor_links=(0.05, 0.03), new_anchor_by="user 'ana', run manual__9"), PROMOTE,
     "new baseline", True, "asked by user 'ana', run manual__9"),
    ("new anchor asked: a regressed canary still rolls back",
     ev(judgement=judgement("regressed", 0.4), new_anchor_by="user 'ana', run manual__9"), ROLL_BACK,
     "regressed", False, "+40.0%"),
    ("new anchor asked: an SLO still rolls back",
     ev(slo_violations=("error_rate = 0.05, SLO limit 0",), new_anchor_by="user 'ana', run manual__9"),
     ROLL_BACK, "slo violated", False, "error_rate"),
    ("no judgement outside a first deploy is no pass", ev(judgement=None, on_inconclusive="fail"), ROLL_BACK,
     "not judged", False, "no judgement"),
]


@pytest.mark.parametrize(("evidence", "action", "verdict", "anchor", "phrase"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_decide_rules(evidence: ReleaseEvidence, action: str, verdict: str, anchor: bool, phrase: str) -> None:
    d = decide(evidence)
    assert (d.action, d.verdict, d.becomes_anchor) == (action, verdict, anchor), d.describe()
    assert phrase in " ".join(d.reasons), d.reasons
    assert d.as_dict()["reasons"] == list(d.reasons)


def test_cumulative_change_compounds_the_chain_and_this_release() -> None:
    d = decide(ev(judgement=judgement("inconclusive", 0.02), anchor_links=(0.03, 0.04), on_inconclusive="pass",
                  max_cumulative_regression=0.5))
    assert d.headline_change == pytest.approx(0.02)
    assert d.cumulative_change == pytest.approx(1.03 * 1.04 * 1.02 - 1)


@pytest.mark.parametrize(("metrics", "expected"), [
    ([_m("e2e_ms", 1, "pass", 0.10, 0.1), _m("e2e_ms", 4, "pass", 0.20, 0.1)], 0.15),  # equal widths: mean
    ([_m("e2e_ms", 1, "pass", 0.10, 0.05), _m("e2e_ms", 4, "pass", 0.40, 0.10)], 0.16),  # 4:1 weights
    ([_m("e2e_ms", 1, "pass", 0.10, 0.0), _m("e2e_ms", 4, "pass", 0.20, 0.1)], 0.15),  # a zero width: plain mean
    ([_m("ttft_ms", 1, "regressed", 0.9), _m("e2e_ms", 1, "pass", 0.05)], 0.05),  # only e2e counts
    ([{"metric": "e2e_ms", "concurrency": 1, "verdict": "skipped", "change": None, "low": None, "high": None},
      _m("output_tokens_per_s", 1, "pass", -0.2, 0.01)], 0.25),  # tokens/s down 20 % = 25 % slower
    ([_m("ttft_ms", 1, "pass", 0.05)], None),
    ([], None),
])
def test_headline_change(metrics: list[dict[str, Any]], expected: float | None) -> None:
    got = headline_change({"verdict": "pass", "metrics": metrics})
    assert got == (pytest.approx(expected) if expected is not None else None)


@pytest.mark.parametrize(("decision", "expected"), [
    (ReleaseDecision(PROMOTE, "pass", (), 0.05, 0.05, True), ()),
    (ReleaseDecision(PROMOTE, "inconclusive", (), 0.05, 0.1, False), (0.02, 0.03, 0.05)),
    (ReleaseDecision(PROMOTE, "not judged", (), None, None, False), (0.02, 0.03)),
    (ReleaseDecision(ROLL_BACK, "regressed", (), 0.4, 0.5, False), (0.02, 0.03)),
    (ReleaseDecision(HOLD, "inconclusive", (), 0.05, 0.1, False), (0.02, 0.03)),
])
def test_next_anchor_links(decision: ReleaseDecision, expected: tuple[float, ...]) -> None:
    assert next_anchor_links((0.02, 0.03), decision) == expected


@pytest.mark.parametrize(("field", "value", "named"), [
    ("on_inconclusive", "maybe", "'maybe'"),
    ("on_inconclusive", "HOLD", "['hold', 'pass', 'fail']"),
    ("approval", "yes", "['approve', 'reject']"),
    ("max_cumulative_regression", 0.0, "0.0"),
    ("max_cumulative_regression", -0.1, "-0.1"),
    ("max_cumulative_regression", float("nan"), "nan"),
    ("max_cumulative_regression", True, "True"),
    ("anchor_links", (0.1, float("inf")), "inf"),
    ("anchor_links", (-1.0,), "-1.0"),
])
def test_bad_input_is_refused_naming_it(field: str, value: Any, named: str) -> None:
    with pytest.raises(RayliftValueError) as err:
        decide(ev(**{field: value}))
    assert named in str(err.value)
    assert field in str(err.value)


def test_a_sequence_of_slowdowns_is_stopped_by_the_chain() -> None:
    """Three inconclusive +6 % releases promoted by policy: the second one breaks the 10 % limit."""
    links: tuple[float, ...] = ()
    actions = []
    for _ in range(3):
        d = decide(ev(judgement=judgement("inconclusive", 0.06), anchor_links=links, on_inconclusive="pass"))
        actions.append(d.action)
        links = next_anchor_links(links, d)
    assert actions == [PROMOTE, ROLL_BACK, ROLL_BACK]
    assert links == (pytest.approx(0.06),)


def test_against_a_fresh_replica_of_the_anchor_the_headline_is_the_change_since_the_anchor() -> None:
    """Issue 45: a canary judged against a fresh replica of the anchor's config compounds no chain (its noise would
    grow with it): the headline is the cumulative change, and the chain after a promote is that one change."""
    chain = (0.05, 0.03)
    served = decide(ev(judgement=judgement("inconclusive", 0.04), anchor_links=chain, on_inconclusive="pass",
                       baseline_runs="fresh-anchor"))
    assert served.action == PROMOTE and served.against_anchor
    assert served.cumulative_change == pytest.approx(0.04)  # not 1.05 * 1.03 * 1.04 - 1
    assert any("fresh replica of the anchor's config" in r for r in served.reasons), served.reasons
    assert next_anchor_links(chain, served) == (pytest.approx(0.04),)
    over = decide(ev(judgement=judgement("inconclusive", 0.095), anchor_links=(), on_inconclusive="pass",
                     baseline_runs="fresh-anchor"))
    assert over.action == ROLL_BACK and over.verdict == "cumulative regression"
    assert "measured against a fresh replica of the anchor's config" in over.reasons[0]
    # judged against what serves (or a fresh replica of the serving config), the chain compounds as before
    for runs in ("serving", "fresh-serving"):
        compounded = decide(ev(judgement=judgement("inconclusive", 0.04), anchor_links=chain, on_inconclusive="pass",
                               baseline_runs=runs))
        assert compounded.cumulative_change == pytest.approx(1.05 * 1.03 * 1.04 - 1) and not compounded.against_anchor
    with pytest.raises(RayliftValueError, match="baseline_runs 'stale' is not one of"):
        decide(ev(baseline_runs="stale"))


def test_a_pilot_is_measured_again_only_inside_the_unclear_band() -> None:
    """Issue 45: +3 % < pilot headline <= +25 %: 4x the requests; outside it (or unmeasured) the pilot decides."""
    from raylift.release.decision import confirmation_requests

    assert confirmation_requests(judgement("inconclusive", 0.05), 128) == 512
    assert confirmation_requests(judgement("regressed", 0.25), 16) == 64
    for clear in (-0.2, 0.0, 0.03, 0.26, 2.0):
        assert confirmation_requests(judgement("inconclusive", clear), 128) is None, clear
    assert confirmation_requests({"verdict": "failed", "metrics": []}, 128) is None


@pytest.mark.parametrize(("favours", "verdict", "action", "refused"), [
    ("candidate", "pass", HOLD, True),  # the canary had the quieter node: its pass could be the node's
    ("baseline", "regressed", HOLD, True),  # the canary had the busier node: its regression could be the node's
    ("candidate", "regressed", ROLL_BACK, False),  # regressed even with the quieter node: it stands
    ("baseline", "pass", PROMOTE, False),  # passed even with the busier node: it stands
    (None, "pass", PROMOTE, False),
])
def test_a_verdict_the_arms_placement_alone_could_give_is_refused(favours: str | None, verdict: str, action: str,
                                                                 refused: bool) -> None:
    """Ray placed the canary's arms on unlike nodes (raylift.serve.placement): a sharing replica measured +26..65 %
    slower on the real stack, so a verdict in the placement's favour is inconclusive (on_inconclusive decides)."""
    d = decide(ev(judgement=judgement(verdict, 0.4 if verdict == "regressed" else 0.0), on_inconclusive="hold",
                  placement_favours=favours, placement="the candidate (llm-canary) on node(s) aaaa with 0 other"))
    assert d.action == action, d
    assert (d.verdict == "inconclusive") is refused
    assert any("Ray placed the arms unlike" in r and "llm-canary" in r for r in d.reasons) is refused, d.reasons
    assert not (refused and d.becomes_anchor)
    with pytest.raises(RayliftValueError, match="placement_favours 'serving' is not one of"):
        decide(ev(placement_favours="serving"))


def test_the_release_plan_chooses_canary_only_for_a_code_change_of_a_serving_app() -> None:
    """raylift.release.plan is the one place the canary/direct choice is made (the deploy step carries it out)."""
    from raylift.release.plan import plan_release

    serving = {"name": "llm", "import_path": "app:build", "args": {"model": "/store/a"},
               "deployments": [{"name": "LLMServer", "num_replicas": 1}]}
    new_weights = {**serving, "args": {"model": "/store/b"}}
    more_replicas = {**serving, "deployments": [{"name": "LLMServer", "num_replicas": 2}]}
    assert plan_release("canary", "llm", serving, new_weights).kind == "canary"
    assert plan_release(None, "llm", serving, new_weights).kind == "canary"  # the Param's default
    assert plan_release("direct", "llm", serving, new_weights).kind == "direct"
    first = plan_release("canary", "llm", None, new_weights)
    assert first.kind == "direct" and "first deploy" in first.why
    in_place = plan_release("canary", "llm", serving, more_replicas)
    assert in_place.kind == "direct" and "restarts no replica" in in_place.why
    with pytest.raises(RayliftValueError, match=r"'release' must be one of \['canary', 'direct'\], got 'blue'"):
        plan_release("blue", "llm", serving, new_weights)


def test_a_change_the_serving_cluster_cannot_run_is_planned_blue_green_unless_direct_is_asked_for() -> None:
    """A new image/runtime is never a canary on the old cluster (which would judge the old image): blue/green, for
    a serving app and for an unchanged app entry alike (the cluster under it changes); release: direct says the
    outage it takes."""
    from raylift.release.plan import plan_release

    serving = {"name": "llm", "import_path": "app:build", "deployments": [{"name": "LLMServer", "num_replicas": 1}]}
    change = "the runtime lock moved (a1b2 -> c3d4)"
    for candidate in (serving, {**serving, "args": {"model": "/store/b"}}):
        plan = plan_release("canary", "llm", serving, candidate, cluster_change=change)
        assert plan.kind == "blue_green" and change in plan.why, plan
    assert plan_release(None, "llm", None, serving, cluster_change=change).kind == "blue_green"
    direct = plan_release("direct", "llm", serving, serving, cluster_change=change)
    assert direct.kind == "direct" and "announced outage" in direct.why, direct
    assert plan_release("canary", "llm", serving, serving).kind == "direct"  # no cluster change: nothing restarts
