"""What a benchmarked deployment costs: per hour, per run, and per million output tokens.

Prices come from ``raylift/data/prices.json`` (dated on-demand list prices, Linux, per region) and can
be overridden per call, e.g. with a negotiated rate. Node counts are ``{"instance type": count}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from raylift.errors import BenchmarkError, RayliftValueError

DEFAULT_REGION = "us-east-1"


def price_table() -> dict[str, Any]:
    """The bundled price file as a dict (``as_of``, ``source``, ``regions``)."""
    return json.loads(resources.files("raylift").joinpath("data/prices.json").read_text())


def load_prices(region: str = DEFAULT_REGION, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Hourly USD price per instance type in ``region``, with ``overrides`` applied on top."""
    regions = price_table()["regions"]
    if region not in regions:
        raise RayliftValueError(f"no prices for region {region!r}; known: {sorted(regions)} (or pass overrides)")
    prices = dict(regions[region])
    for name, value in (overrides or {}).items():
        if value < 0:
            raise RayliftValueError(f"price override for {name!r} is negative ({value})")
        prices[name] = float(value)
    return prices


def hourly_cost(nodes: Mapping[str, int], prices: Mapping[str, float]) -> float:
    """USD per hour for ``nodes`` (instance type → count)."""
    total = 0.0
    for instance_type, count in nodes.items():
        if count < 0:
            raise RayliftValueError(f"node count for {instance_type!r} is negative ({count})")
        if instance_type not in prices:
            raise BenchmarkError(
                f"no price for instance type {instance_type!r}; add it to raylift/data/prices.json "
                "or pass it in the price overrides"
            )
        total += prices[instance_type] * count
    return total


def cost_per_million_tokens(hourly_usd: float, output_tokens_per_s: float) -> float | None:
    """USD per 10⁶ output tokens at a sustained throughput; None without throughput."""
    if output_tokens_per_s <= 0:
        return None
    return hourly_usd / (output_tokens_per_s * 3600.0) * 1e6


def best_level(result: Mapping[str, Any]) -> dict[str, Any]:
    """The concurrency level with the highest output tokens/s: the throughput the fleet can sustain."""
    levels = result.get("levels") or []
    if not levels:
        raise BenchmarkError("benchmark result has no levels; run the benchmark before costing it")
    return max(levels, key=lambda lv: lv["output_tokens_per_s"])


def cost_summary(
    result: Mapping[str, Any],
    nodes: Mapping[str, int],
    *,
    region: str = DEFAULT_REGION,
    prices: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Hourly cost, cost of the benchmark run itself, and cost per 10⁶ tokens at the best level."""
    table = load_prices(region, prices)
    hourly = hourly_cost(nodes, table)
    best = best_level(result)
    run_seconds = sum(lv["duration_s"] for lv in result["levels"])
    return {
        "nodes": dict(nodes),
        "region": region,
        "prices_as_of": price_table()["as_of"],
        "usd_per_hour": hourly,
        "usd_for_run": hourly * run_seconds / 3600.0,
        "best_concurrency": best["concurrency"],
        "output_tokens_per_s": best["output_tokens_per_s"],
        "usd_per_million_output_tokens": cost_per_million_tokens(hourly, best["output_tokens_per_s"]),
    }


def run_cost(
    result: Mapping[str, Any],
    nodes: Mapping[str, int],
    *,
    region: str = DEFAULT_REGION,
    prices: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """:func:`cost_summary` plus every level's cost per 10⁶ output tokens: what a run's result, record,
    log and report show. A node type without a price raises :class:`BenchmarkError` naming it."""
    if not nodes:
        raise BenchmarkError("the target cannot tell which nodes it runs, so the run has no cost")
    summary = cost_summary(result, nodes, region=region, prices=prices)
    summary["levels"] = [
        {"concurrency": lv["concurrency"], "output_tokens_per_s": lv["output_tokens_per_s"],
         "usd_per_million_output_tokens": cost_per_million_tokens(summary["usd_per_hour"], lv["output_tokens_per_s"])}
        for lv in result["levels"]
    ]
    summary["price_overrides"] = dict(prices or {})
    return summary


def format_cost(cost: Mapping[str, Any]) -> str:
    """One line for the task log: the cluster's hourly price and the cost per 10⁶ tokens at each level."""
    if cost.get("error"):
        return f"cost unknown: {cost['error']}"
    nodes = ", ".join(f"{count} x {name}" for name, count in cost["nodes"].items())
    levels = "; ".join(f"concurrency {lv['concurrency']}: {_fmt(lv['usd_per_million_output_tokens'], '.4g')} USD"
                       for lv in cost["levels"])
    return (f"cost: {cost['usd_per_hour']:.4g} USD/hour for {nodes} ({cost['region']}, list prices of "
            f"{cost['prices_as_of']}); per 10^6 output tokens: {levels}")


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def compare_runs(runs: Sequence[Mapping[str, Any]]) -> str:
    """Side-by-side latency and cost of runs, as in a Graviton vs x86 comparison.

    Each run is ``{"name": str, "result": <run_benchmark result>, "nodes": {type: count}}`` with
    optional ``"region"`` and ``"prices"``. Latencies are from each run's best-throughput level; the
    last column compares cost per 10⁶ tokens with the first run.
    """
    if not runs:
        raise RayliftValueError("compare_runs needs at least one run")
    columns = (("run", 16), ("nodes", 22), ("$/hour", 9), ("conc", 5), ("out tok/s", 10),
               ("TTFT p50", 9), ("TTFT p99", 9), ("E2E p50", 9), ("$/1M tok", 9), ("vs first", 9))
    header = " ".join(name.rjust(width) for name, width in columns)
    lines = [header, "-" * len(header)]
    reference: float | None = None
    for index, run in enumerate(runs):
        summary = cost_summary(run["result"], run["nodes"], region=run.get("region", DEFAULT_REGION),
                               prices=run.get("prices"))
        best = best_level(run["result"])
        per_million = summary["usd_per_million_output_tokens"]
        if index == 0:
            reference = per_million
        relative = (
            f"{per_million / reference - 1:+.0%}" if per_million is not None and reference else "-"
        )
        nodes = ",".join(f"{count}x{name}" for name, count in run["nodes"].items())
        cells = (
            str(run["name"])[:16], nodes[:22], f"{summary['usd_per_hour']:.3f}", str(best["concurrency"]),
            f"{best['output_tokens_per_s']:.1f}", _fmt(best["ttft_ms"]["p50"], ".1f"),
            _fmt(best["ttft_ms"]["p99"], ".1f"), _fmt(best["e2e_ms"]["p50"], ".1f"),
            _fmt(per_million, ".3f"), relative,
        )
        lines.append(" ".join(cell.rjust(width) for cell, (_, width) in zip(cells, columns)))
    return "\n".join(lines)
