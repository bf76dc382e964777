"""The report's comparison section: a canary against the serving app, measured side by side on two stubs."""

from __future__ import annotations

from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from raylift.measure.judgement import judge
from raylift.measure.metrics import percentile
from raylift.measure.report import write_report, write_run_report
from raylift.measure.runner import Arm, run_side_by_side
from raylift.store import LocalStore


class Tables(HTMLParser):
    """Each table with an id: its rows as lists of cell texts; and every element id seen."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.ids: set[str] = set()
        self._table: str | None = None
        self._cell: list[str] | None = None
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs).get("id")
        if found:
            self.ids.add(found)
        if tag == "table" and found:
            self._table = found
            self.tables[found] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._table and self._cell is not None:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


@pytest.fixture()
def arms(stub: Callable[..., str]) -> dict[str, dict[str, Any]]:
    fast, slow = stub(ttft_ms=20, itl_ms=1), stub(ttft_ms=60, itl_ms=1)
    return run_side_by_side({"candidate": Arm(fast), "baseline": Arm(slow, scale=2)}, "stub", concurrency=[1, 2],
                            requests_per_level=8, slos={"max_ttft_p99_ms": 40.0})


def test_the_comparison_section_shows_both_arms_the_verdict_and_the_drift(arms: dict[str, dict[str, Any]],
                                                                          tmp_path: Path) -> None:
    candidate, baseline = arms["candidate"], arms["baseline"]
    # the candidate's engine figures as a vLLM endpoint would give them (the stubs have no /metrics)
    candidate["levels"][0]["engine_metrics"] = {
        "samples": 4, "interval_s": 0.5, "scrape_errors": 0, "waiting": {"mean": 1.5, "max": 3.0},
        "running": {"mean": 2.25, "max": 4.0}, "kv_cache_usage": {"mean": 0.4, "max": 0.8},
        "kv_cache_metric": "vllm:kv_cache_usage_perc", "preemptions": 2.0}
    judgement = judge(candidate, baseline, confidence=0.95, tolerance=0.1, min_requests=4).as_dict()
    release = {"action": "promote", "verdict": "pass", "reasons": ["e2e 60 % faster than what serves"],
               "headline_change": -0.6, "cumulative_change": 0.04, "anchor_run_id": "run-7"}
    comparison = {"baseline": baseline, "judgement": judgement, "release": release}
    paths = write_report({**candidate, "judgement": judgement}, tmp_path, comparison=comparison)
    assert paths["comparison_png"].read_bytes().startswith(b"\x89PNG")
    page = paths["html"].read_text()
    found = Tables(page)
    assert "comparison" in found.ids and 'alt="benchmark-comparison"' in page
    assert "Against the last good run" not in page  # the canary's verdict is the comparison's, shown once
    assert "regression judgement:" in page and f"Verdict: {judgement['verdict']}" in page
    decision = dict(found.tables["release"])  # two-cell rows: heading, value
    assert decision["decision"] == "promote" and decision["anchor run"] == "run-7"
    assert decision["drift since the anchor (compounded)"] == "+4.0%"
    assert decision["change against what serves (e2e, + slower)"] == "-60.0%"
    # quantiles: per level and metric, baseline then candidate (n, p50, p90, p99), from each arm's own samples
    rows = {(r[0], r[1]): r for r in found.tables["quantiles"][1:]}
    assert set(rows) == {(c, m) for c in ("1", "2") for m in ("TTFT (ms)", "TPOT (ms)", "end-to-end (ms)",
                                                              "output tokens/s per request")}
    ttft = rows[("2", "TTFT (ms)")]
    base_ttft = sorted(baseline["levels"][1]["samples"]["ttft_ms"])
    mine_ttft = sorted(candidate["levels"][1]["samples"]["ttft_ms"])
    assert ttft[2:6] == ["16", *(f"{percentile(base_ttft, q):.1f}" for q in (50, 90, 99))]
    assert ttft[6:10] == ["8", *(f"{percentile(mine_ttft, q):.1f}" for q in (50, 90, 99))]
    assert ttft[10].startswith("-")  # the candidate's TTFT is lower
    # engine metrics and goodput of both arms per level, beside the client's figures
    engine = {(r[0], r[1]): r for r in found.tables["engine"][1:]}
    one = engine[("1", "candidate")]
    assert one[2:4] == ["1", "8"] and one[7:11] == ["1.5 / 3.0", "2.2 / 4.0", "40% / 80%", "2"]
    good = candidate["levels"][0]["goodput"]
    assert one[11:] == [f"{good['goodput_rps']:.2f}", f"{good['share']:.0%}"] and good["good"] > 0
    base_one = engine[("1", "baseline")]
    assert base_one[2:4] == ["2", "16"] and base_one[7] == "unavailable: GET /metrics: HTTP 404"
    assert base_one[-1] == "0%"  # TTFT 60 ms: none within the 40 ms limit
    # the same through the store the gate writes to
    keys = write_run_report(LocalStore(tmp_path / "store"), "runs/r1", candidate, comparison=comparison)
    assert "comparison_png" in keys and (tmp_path / "store" / keys["html"]).exists()


def test_without_a_comparison_or_with_parts_missing_the_page_still_renders(arms: dict[str, dict[str, Any]],
                                                                          tmp_path: Path) -> None:
    candidate, baseline = arms["candidate"], arms["baseline"]
    plain = {k: v for k, v in candidate.items() if k != "judgement"}
    plain["levels"] = [{k: v for k, v in lv.items() if k not in ("engine_metrics", "goodput", "scale")}
                       for lv in candidate["levels"]]
    paths = write_report(plain, tmp_path / "plain")
    found = Tables(paths["html"].read_text())
    assert "comparison_png" not in paths and not {"comparison", "engine", "quantiles", "release"} & found.ids
    for i, comparison in enumerate([
        {},
        {"release": None, "judgement": None, "baseline": None},
        {"release": {"action": "hold", "reasons": "needs a person"}},  # no changes, reasons as one string
        {"baseline": {"levels": [{"concurrency": 1}]}, "judgement": {"verdict": "pass"}},  # no samples, odd judgement
        {"baseline": baseline},
    ]):
        page = write_report(candidate, tmp_path / str(i), comparison=comparison)["html"].read_text()
        assert "</html>" in page
    found = Tables(page)
    assert {"comparison", "quantiles", "engine"} <= found.ids and "release" not in found.ids
    hold = write_report(candidate, tmp_path / "hold", comparison={"release": {"action": "hold",
                                                                              "reasons": "needs a person"}})
    decision = dict(Tables(hold["html"].read_text()).tables["release"])
    assert decision["decision"] == "hold" and decision["drift since the anchor (compounded)"] == "-"
