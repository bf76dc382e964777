from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from raylift.errors import BenchmarkError, RayliftValueError
from raylift.measure.cost import compare_runs, cost_per_million_tokens, cost_summary, hourly_cost, load_prices
from raylift.measure.report import write_report
from raylift.measure.runner import format_table
from raylift.release.gates import evaluate, tail_percentile


def _stats(p99: float) -> dict[str, float]:
    return {"mean": p99 / 2, "p25": p99 / 4, "p50": p99 / 2, "p75": p99 * 0.7, "p90": p99 * 0.9,
            "p95": p99 * 0.95, "p99": p99}


def _level(c: int, tps: float, ttft_p99: float, errors: int = 0, requests: int = 10) -> dict[str, Any]:
    return {"concurrency": c, "requests": requests, "errors": errors, "error_rate": errors / requests, "cancelled": 0,
            "output_tokens": int(tps * 10), "input_tokens": 100, "duration_s": 10.0, "requests_per_s": 1.0,
            "output_tokens_per_s": tps, "ttft_ms": _stats(ttft_p99), "itl_ms": _stats(20),
            "tpot_ms": _stats(20), "e2e_ms": _stats(900)}


def _result(levels: list[dict[str, Any]], model: str = "m") -> dict[str, Any]:
    errors = sum(lv["errors"] for lv in levels)
    return {"model": model, "started_at": "2026-01-01T00:00:00+00:00", "profile": {"name": "smoke"},
            "levels": levels, "overall": {"requests": 10 * len(levels), "errors": errors,
                                          "error_rate": errors / (10 * len(levels))}}


def test_prices_and_cost_math() -> None:
    prices = load_prices("us-east-1")
    assert prices["local"] == 0.0 and prices["c7g.8xlarge"] > 0
    assert load_prices("us-west-2", {"g5.xlarge": 0.5})["g5.xlarge"] == 0.5
    assert hourly_cost({"g5.xlarge": 2, "local": 3}, {"g5.xlarge": 1.0, "local": 0.0}) == 2.0
    assert cost_per_million_tokens(3.6, 1000.0) == pytest.approx(1.0)  # 3.6 M tokens per $3.60 hour
    assert cost_per_million_tokens(1.0, 0.0) is None
    with pytest.raises(BenchmarkError, match="no price for instance type 'x1.huge'"):
        hourly_cost({"x1.huge": 1}, prices)
    with pytest.raises(RayliftValueError):
        load_prices("mars-1")
    summary = cost_summary(_result([_level(1, 100, 50), _level(4, 360, 80)]), {"m5.xlarge": 1},
                           prices={"m5.xlarge": 1.296})
    assert summary["best_concurrency"] == 4
    assert summary["usd_per_million_output_tokens"] == pytest.approx(1.296 / (360 * 3600) * 1e6)
    assert summary["usd_for_run"] == pytest.approx(1.296 * 20 / 3600)


def test_compare_runs_side_by_side() -> None:
    x86 = {"name": "x86", "result": _result([_level(8, 1000, 90)]), "nodes": {"c7i.8xlarge": 10}}
    arm = {"name": "graviton", "result": _result([_level(8, 1000, 70)]), "nodes": {"c7g.8xlarge": 10}}
    table = compare_runs([x86, arm]).splitlines()
    assert len(table) == 4 and "graviton" in table[3] and "10xc7g.8xlarge" in table[3]
    assert table[3].rstrip().endswith("-19%")  # 1.1568 / 1.428 - 1


def test_gates_each_violation() -> None:
    result = _result([_level(1, 100, 300), _level(4, 300, 900, errors=2)])
    violations = evaluate(result, {"max_ttft_p99_ms": 500, "min_output_tokens_per_s": 400,
                                   "max_error_rate": 0.05}, None)
    assert [(v.metric, v.measured, v.limit, v.concurrency) for v in violations] == [
        ("ttft_ms.p99", 900, 500, 4), ("output_tokens_per_s", 300, 400, None), ("error_rate", 0.1, 0.05, None)]
    assert "SLO limit 500" in violations[0].message
    assert evaluate(result, {"max_ttft_p99_ms": None, "min_output_tokens_per_s": None,
                             "max_error_rate": None}, None) == []
    # levels without per-request samples (results from before they were kept) are not judged:
    # the run becomes the new baseline instead of failing (tests/bench/test_judgement.py judges samples)
    assert evaluate(result, {}, _result([_level(1, 120, 250), _level(4, 310, 700)])) == []
    assert evaluate(result, {}, _result([_level(1, 1, 1)], model="other")) == []
    with pytest.raises(RayliftValueError, match="max_regression|tolerance"):
        evaluate(result, {}, result, max_regression=1.0)
    with pytest.raises(RayliftValueError, match="unknown SLO keys"):
        evaluate(result, {"max_latency": 1}, None)


def test_tail_percentile_follows_the_sample_size() -> None:
    assert [tail_percentile(n) for n in (8, 19, 20, 99, 100)] == ["p50", "p50", "p90", "p90", "p99"]


def test_report_files(tmp_path: Path) -> None:
    result = _result([_level(1, 100, 50), _level(4, 300, 90), _level(16, 500, 200)])
    paths = write_report(result, tmp_path, name="run1", history=[_result([_level(1, 90, 60)])])
    assert set(paths) == {"json", "csv", "latency_png", "throughput_png", "history_png", "html"}
    for key in ("latency_png", "throughput_png", "history_png"):
        data = paths[key].read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 5000
    rows = list(csv.DictReader(paths["csv"].open()))
    assert [r["concurrency"] for r in rows] == ["1", "4", "16"] and rows[2]["ttft_ms_p99"] == "200"
    assert json.loads(paths["json"].read_text())["levels"][1]["output_tokens_per_s"] == 300
    page = paths["html"].read_text()
    assert page.count("data:image/png;base64,") == 3 and "TTFT p99" in page
    assert "Against the last good run" not in page  # no judgement: no section
    judged = {**result, "judgement": {"verdict": "regressed", "confidence": 0.95, "tolerance": 0.1, "note": "",
                                      "needed_requests": None, "metrics": [
        {"metric": "e2e_ms", "concurrency": 4, "verdict": "regressed", "baseline_median": 100.0,
         "new_median": 131.0, "change": 0.3, "low": 0.2, "high": 0.4, "note": ""}]}}
    page = write_report(judged, tmp_path / "judged")["html"].read_text()
    assert "Against the last good run: regressed" in page and "[+20%, +40%]" in page and "e2e_ms" in page
    assert len(format_table(result).splitlines()) == 2 + 3
