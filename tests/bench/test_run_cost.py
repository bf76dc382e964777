"""Cost on every run: the price table's figures, per level, in the report a person opens (rendered by headless
chromium, the screenshot kept as var/test-artifacts/report-cost.png) and beside other runs of the model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from raylift.errors import BenchmarkError
from raylift.measure.cost import format_cost, run_cost
from raylift.measure.report import cost_html, write_report
from tests.bench.test_cost_gates_report import _level, _result
from tests.fixtures.browser import headless_chromium
from tests.harness.local_stack import ROOT

PRICES = json.loads((ROOT / "plugins/raylift/data/prices.json").read_text())["regions"]  # the table itself
SCREENSHOT = ROOT / "var/test-artifacts/report-cost.png"


def test_each_level_costs_the_clusters_hourly_price_over_its_throughput() -> None:
    result = _result([_level(1, 100.0, 50), _level(4, 250.0, 80)])
    cost = run_cost(result, {"inf2.48xlarge": 1}, region="us-west-2")
    hourly = PRICES["us-west-2"]["inf2.48xlarge"]
    assert cost["usd_per_hour"] == pytest.approx(hourly)
    per_level = {lv["concurrency"]: lv["usd_per_million_output_tokens"] for lv in cost["levels"]}
    assert per_level[1] == pytest.approx(hourly / (100.0 * 3600) * 1e6)
    assert per_level[4] == pytest.approx(hourly / (250.0 * 3600) * 1e6)
    assert cost["best_concurrency"] == 4 and cost["usd_per_million_output_tokens"] == pytest.approx(per_level[4])
    assert cost["usd_for_run"] == pytest.approx(hourly * 20.0 / 3600)  # two levels of 10 s
    assert "USD/hour for 1 x inf2.48xlarge" in format_cost(cost) and "concurrency 4:" in format_cost(cost)
    # this machine: free unless a figure is declared
    local = run_cost(result, {"local": 2}, prices={"local": 0.25})
    assert local["usd_per_hour"] == 0.5 and local["price_overrides"] == {"local": 0.25}
    assert run_cost(result, {"local": 2})["levels"][0]["usd_per_million_output_tokens"] == 0.0
    with pytest.raises(BenchmarkError, match="no price for instance type 'p9.mega'"):
        run_cost(result, {"p9.mega": 1})
    with pytest.raises(BenchmarkError, match="cannot tell which nodes"):
        run_cost(result, {})


def _priced(result: dict[str, Any], nodes: dict[str, int], target: str) -> dict[str, Any]:
    return {**result, "app": "llm", "target": target, "cost": run_cost(result, nodes)}


def test_the_report_shows_the_cost_and_sets_other_runs_beside_it(tmp_path: Path) -> None:
    graviton = _priced(_result([_level(1, 40.0, 90), _level(4, 120.0, 150)], model="llama-3-8b"),
                       {"c7g.8xlarge": 1}, "eks")
    x86 = _priced(_result([_level(1, 45.0, 80), _level(4, 130.0, 140)], model="llama-3-8b"), {"c7i.8xlarge": 1}, "ecs")
    files = write_report(graviton, tmp_path, peers=[{"label": "last on ecs", "result": x86}])
    page = files["html"].read_text()
    assert "<title>raylift benchmark: app llm, model llama-3-8b, target eks</title>" in page
    mine = graviton["cost"]["usd_per_million_output_tokens"]
    theirs = x86["cost"]["usd_per_million_output_tokens"]
    assert f"{mine:.4g}" in page and f"{theirs:.4g}" in page
    assert f"{theirs / mine - 1:+.0%}" in page  # the x86 run against this one
    assert "unknown: BenchmarkError" in cost_html({"cost": {"error": "BenchmarkError: no price"}})

    from selenium.webdriver.common.by import By

    with headless_chromium() as driver:
        driver.get(files["html"].as_uri())
        text = driver.find_element(By.TAG_NAME, "body").text  # what a person sees, as the browser laid it out
        assert "USD per hour" in text and "USD per 10⁶ output tokens" in text
        assert "Against other runs of this model" in text and "1 × c7i.8xlarge" in text
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        driver.set_window_size(1200, 1600)
        driver.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.stat().st_size > 10_000
