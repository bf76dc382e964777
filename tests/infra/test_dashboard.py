"""Every benchmark widget of the CloudWatch dashboard (terraform/modules/dashboard) names a metric, namespace
and dimension set that raylift's CloudWatch hook publishes, so no widget stays empty."""

from __future__ import annotations

import re
from pathlib import Path

from raylift.hooks.cloudwatch import BENCHMARK_METRICS, NAMESPACE, benchmark_metric_data
from tests.infra.terraform_model import TerraformModule, blocks, unquote

TERRAFORM = Path(__file__).resolve().parents[2] / "terraform"
FULL = {"overall": {"ttft_ms": {"p50": 1.0, "p99": 2.0}, "itl_ms": {"p50": 3.0}, "output_tokens_per_s": 4.0,
                    "error_rate": 0.0}}


def _published() -> tuple[set[str], list[str]]:
    """(metric names, dimension names in order) of what the hook sends for a complete result."""
    data = benchmark_metric_data(FULL, model="m", target="ecs", run_id="r")
    return {d["MetricName"] for d in data}, [dim["Name"] for dim in data[0]["Dimensions"]]


def _widget_metrics(example: str) -> list[str]:
    """The benchmark_metrics an example's dashboard shows (its module call's value, else the module default)."""
    module = TerraformModule.load(TERRAFORM / "modules" / "dashboard")
    call = next(body for doc in TerraformModule.load(TERRAFORM / "examples" / example).docs.values()
                for name, body in blocks(doc, "module") if name == "dashboard")
    raw = call.get("benchmark_metrics", module.variables["benchmark_metrics"]["default"])
    return [unquote(m) for m in raw]


def test_every_benchmark_widget_shows_a_published_metric() -> None:
    names, _ = _published()
    for example in ("ecs", "eks"):
        shown = _widget_metrics(example)
        assert set(shown) - names == set(), f"{example}: widgets for metrics nothing publishes"
        assert names - set(shown) == set(), f"{example}: published metrics without a widget"


def test_the_widget_search_uses_the_published_namespace_and_dimensions() -> None:
    module = TerraformModule.load(TERRAFORM / "modules" / "dashboard")
    text = (module.path / "main.tf").read_text()
    [(namespace, dims)] = re.findall(r"SEARCH\('\{(\$\{var\.\w+\}),([\w,]+)\}", text)
    assert namespace == "${var.metric_namespace}"
    assert unquote(module.variables["metric_namespace"]["default"]) == NAMESPACE
    assert dims.split(",") == _published()[1]
    assert set(BENCHMARK_METRICS) == _published()[0]
