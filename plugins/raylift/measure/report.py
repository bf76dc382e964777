"""Files for a benchmark run: JSON, CSV (one row per level), PNG plots and a self-contained HTML page.

matplotlib is imported inside the plotting functions (Agg backend) so importing this module stays
cheap for DAG parsing.
"""

from __future__ import annotations

import base64
import csv
import html
import json
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from raylift.measure.metrics import SAMPLE_METRICS, STAT_KEYS, percentile
from raylift.measure.runner import format_table

if TYPE_CHECKING:
    from raylift.store import ObjectStore

REPORT_PAGE = "benchmark.html"
HISTORY_RUNS = 20

LATENCY_METRICS = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
SCALARS = ("concurrency", "requests", "errors", "error_rate", "cancelled", "output_tokens", "input_tokens",
           "duration_s", "requests_per_s", "output_tokens_per_s")


def csv_rows(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One flat row per level: the scalars, then ``<metric>_<stat>`` for every latency metric."""
    rows = []
    for level in result["levels"]:
        row = {key: level.get(key) for key in SCALARS}
        for metric in LATENCY_METRICS:
            for stat in STAT_KEYS:
                row[f"{metric}_{stat}"] = level[metric][stat]
        rows.append(row)
    return rows


def write_json(result: Mapping[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(result, indent=2, sort_keys=True))
    return path


def write_csv(result: Mapping[str, Any], path: Path) -> Path:
    rows = csv_rows(result)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else list(SCALARS))
        writer.writeheader()
        writer.writerows(rows)
    return path


PLOTS_EXTRA_NOTE = ("No plots: matplotlib is not installed beside Airflow. Install raylift[plots] "
                    "(pip install 'raylift[plots]') for the latency, throughput, history and comparison plots.")


def plots_available() -> bool:
    """Whether matplotlib (raylift's ``plots`` extra) is importable; checked without importing it."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_latency(result: Mapping[str, Any], path: Path) -> Path:
    """TTFT, ITL and end-to-end latency percentiles against concurrency."""
    plt = _pyplot()
    levels = result["levels"]
    x = [lv["concurrency"] for lv in levels]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, metric, title in zip(axes, ("ttft_ms", "itl_ms", "e2e_ms"), ("TTFT", "Inter-token latency", "End-to-end")):
        for stat in ("p50", "p90", "p99"):
            ax.plot(x, [lv[metric][stat] for lv in levels], marker="o", label=stat)
        ax.set(title=f"{title} (ms)", xlabel="concurrency", xscale="log" if max(x) > 8 else "linear")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(f"{result.get('model', '')} latency vs concurrency")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_throughput(result: Mapping[str, Any], path: Path) -> Path:
    """Output tokens/s and requests/s against concurrency."""
    plt = _pyplot()
    levels = result["levels"]
    x = [lv["concurrency"] for lv in levels]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(x, [lv["output_tokens_per_s"] for lv in levels], marker="o", color="tab:blue")
    ax.set(xlabel="concurrency", ylabel="output tokens/s", title="Throughput vs concurrency")
    ax.grid(alpha=0.3)
    sweep = result.get("sweep")
    if sweep:  # the saturation sweep's knee: more concurrency beyond it buys latency, not tokens
        ax.axvline(sweep["knee_concurrency"], color="tab:red", linestyle="--",
                   label=f"knee (concurrency {sweep['knee_concurrency']})")
        ax.legend(loc="lower right")
    right = ax.twinx()
    right.plot(x, [lv["requests_per_s"] for lv in levels], marker="s", color="tab:orange")
    right.set_ylabel("requests/s")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_history(history: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Run history, oldest first: best output tokens/s and the worst level's TTFT p99 per run."""
    plt = _pyplot()
    labels = [str(run.get("started_at", i)) for i, run in enumerate(history)]
    tps = [max((lv["output_tokens_per_s"] for lv in run["levels"]), default=0.0) for run in history]
    ttft = [max((lv["ttft_ms"]["p99"] or 0.0 for lv in run["levels"]), default=0.0) for run in history]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    top.plot(range(len(history)), tps, marker="o")
    top.set(ylabel="output tokens/s", title="Run history")
    bottom.plot(range(len(history)), ttft, marker="o", color="tab:red")
    bottom.set(ylabel="TTFT p99 (ms)")
    bottom.set_xticks(range(len(history)), labels, rotation=30, ha="right", fontsize=7)
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _money(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"


def cost_html(result: Mapping[str, Any], peers: Sequence[Mapping[str, Any]] = ()) -> str:
    """The run's cost (per hour, per 10⁶ output tokens at each level) and, for ``peers`` (the last good run,
    other targets' last runs of the model), the same figures side by side, as in a Graviton vs x86 table."""
    cost = result.get("cost")
    if not cost:
        return ""
    if cost.get("error"):
        return f"<h2>Cost</h2>\n<p>unknown: {html.escape(str(cost['error']))}</p>"
    nodes = ", ".join(f"{count} × {name}" for name, count in cost["nodes"].items())
    rows = "".join(f"<tr><td>{lv['concurrency']}</td><td>{lv['output_tokens_per_s']:.1f}</td>"
                   f"<td>{_money(lv['usd_per_million_output_tokens'])}</td></tr>" for lv in cost["levels"])
    out = [f"<h2>Cost</h2>\n<p>{html.escape(nodes)}: <b>{_money(cost['usd_per_hour'])} USD per hour</b> "
           f"({html.escape(str(cost['region']))} list prices of {html.escape(str(cost['prices_as_of']))}"
           f"{'; overrides ' + html.escape(json.dumps(cost['price_overrides'])) if cost.get('price_overrides') else ''}); "
           f"this benchmark {_money(cost['usd_for_run'])} USD</p>",
           '<table border="1" cellpadding="4"><tr><th>concurrency</th><th>output tok/s</th>'
           f"<th>USD per 10⁶ output tokens</th></tr>{rows}</table>"]
    compared = [(str(p.get("label", "")), p["result"]) for p in peers
                if (p.get("result") or {}).get("cost") and not p["result"]["cost"].get("error")]
    if compared:
        mine = cost["usd_per_million_output_tokens"]
        lines = []
        for label, run in [("this run", result), *compared]:
            c = run["cost"]
            per_m = c["usd_per_million_output_tokens"]
            vs = f"{per_m / mine - 1:+.0%}" if per_m is not None and mine else "-"
            lines.append(f"<tr><td>{html.escape(label)}</td><td>{html.escape(str(run.get('target', '-')))}</td>"
                         f"<td>{html.escape(', '.join(f'{n} × {t}' for t, n in c['nodes'].items()))}</td>"
                         f"<td>{_money(c['usd_per_hour'])}</td><td>{c['best_concurrency']}</td>"
                         f"<td>{c['output_tokens_per_s']:.1f}</td><td>{_money(per_m)}</td><td>{vs}</td></tr>")
        out.append('<h3>Against other runs of this model</h3>\n<table border="1" cellpadding="4"><tr><th>run</th>'
                   "<th>target</th><th>nodes</th><th>USD/hour</th><th>best concurrency</th><th>output tok/s</th>"
                   f"<th>USD per 10⁶ tokens</th><th>vs this run</th></tr>{''.join(lines)}</table>")
    return "\n".join(out)


def sweep_html(result: Mapping[str, Any]) -> str:
    """The saturation sweep's outcome: why it stopped, the knee and the best level."""
    sweep = result.get("sweep")
    if not sweep:
        return ""
    return (f"<h2>Saturation sweep</h2>\n<p>levels {html.escape(str(sweep['levels']))}; stopped: "
            f"{html.escape(str(sweep['stop_reason']))}. <b>Knee at concurrency {sweep['knee_concurrency']}</b> "
            f"(the lowest that reached the best throughput within {sweep['spec']['min_gain']:.0%}); best level "
            f"{sweep['best_concurrency']}, {sweep['best_output_tokens_per_s']:.1f} output tok/s.</p>")


COMPARED_QUANTILES = (50, 90, 99)
_METRIC_NAMES = {"ttft_ms": "TTFT (ms)", "tpot_ms": "TPOT (ms)", "e2e_ms": "end-to-end (ms)",
                 "output_tokens_per_s": "output tokens/s per request"}


def _levels_by_concurrency(result: Mapping[str, Any] | None) -> dict[int, Mapping[str, Any]]:
    return {lv["concurrency"]: lv for lv in (result or {}).get("levels") or [] if "concurrency" in lv}


def _sample_values(level: Mapping[str, Any] | None, metric: str) -> list[float]:
    values = ((level or {}).get("samples") or {}).get(metric) or []
    return [float(v) for v in values if isinstance(v, int | float)]


def compared_levels(result: Mapping[str, Any], baseline: Mapping[str, Any] | None) -> list[int]:
    """The concurrency levels both runs measured, in the candidate's order."""
    base = _levels_by_concurrency(baseline)
    return [c for c in _levels_by_concurrency(result) if c in base]


def plot_comparison(result: Mapping[str, Any], baseline: Mapping[str, Any], path: Path) -> Path:
    """Box plots of the per-request samples, baseline beside candidate: one row per level, one column per
    metric the judgement compares (TTFT, TPOT, e2e, output tokens/s)."""
    plt = _pyplot()
    levels = compared_levels(result, baseline)
    mine, base = _levels_by_concurrency(result), _levels_by_concurrency(baseline)
    rows = max(1, len(levels))
    fig, axes = plt.subplots(rows, len(SAMPLE_METRICS), figsize=(13, 2.6 * rows + 0.8), squeeze=False)
    for row, c in enumerate(levels):
        for col, metric in enumerate(SAMPLE_METRICS):
            ax = axes[row][col]
            data = [(label, values) for label, values in (("baseline", _sample_values(base[c], metric)),
                                                          ("candidate", _sample_values(mine[c], metric)))
                    if values]
            if data:
                ax.boxplot([values for _, values in data], orientation="horizontal", widths=0.6)
                ax.set_yticks(range(1, len(data) + 1), [label for label, _ in data])
            ax.set_title(f"{_METRIC_NAMES[metric]}, concurrency {c}", fontsize=9)
            ax.grid(alpha=0.3)
    if not levels:
        axes[0][0].set_title("no level measured by both")
    fig.suptitle("Candidate vs baseline, per request (same time window)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _num(value: Any, fmt: str = "{:.1f}") -> str:
    return fmt.format(value) if isinstance(value, int | float) and not isinstance(value, bool) else "-"


def _pct(value: Any) -> str:
    return _num(value, "{:+.1%}")


def _quantile_rows(result: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    mine, base = _levels_by_concurrency(result), _levels_by_concurrency(baseline)
    rows = []
    for c in compared_levels(result, baseline):
        for metric in SAMPLE_METRICS:
            cells = [str(c), html.escape(_METRIC_NAMES[metric])]
            medians = []
            for level in (base[c], mine[c]):
                values = sorted(_sample_values(level, metric))
                cells.append(str(len(values)))
                cells += [_num(percentile(values, q)) if values else "-" for q in COMPARED_QUANTILES]
                medians.append(percentile(values, 50) if values else None)
            b, n = medians
            cells.append(_pct(n / b - 1) if b and n is not None else "-")
            rows.append("<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    return rows


def _stat_cell(stats: Any, fmt: str = "{:.1f}") -> str:
    if not isinstance(stats, Mapping):
        return "-"
    return f"{_num(stats.get('mean'), fmt)} / {_num(stats.get('max'), fmt)}"


def engine_rows(runs: Sequence[tuple[str, Mapping[str, Any] | None]]) -> list[str]:
    """Per level and run: the client's figures, the engine's (``engine_metrics``) and ``goodput``."""
    levels: list[int] = []
    for _, run in runs:
        levels += [c for c in _levels_by_concurrency(run) if c not in levels]
    rows = []
    for c in levels:
        for label, run in runs:
            level = _levels_by_concurrency(run).get(c)
            if level is None:
                continue
            engine = level.get("engine_metrics") or {}
            good = level.get("goodput") or {}
            if engine.get("unavailable"):
                engine_cells = [f'<td colspan="4">unavailable: {html.escape(str(engine["unavailable"]))}</td>']
            elif engine:
                engine_cells = [f"<td>{_stat_cell(engine.get('waiting'))}</td>",
                                f"<td>{_stat_cell(engine.get('running'))}</td>",
                                f"<td>{_stat_cell(engine.get('kv_cache_usage'), '{:.0%}')}</td>",
                                f"<td>{_num(engine.get('preemptions'), '{:.0f}')}</td>"]
            else:
                engine_cells = ['<td colspan="4">not sampled</td>']
            if good.get("unavailable"):
                good_cells = [f'<td colspan="2">{html.escape(str(good["unavailable"]))}</td>']
            elif good:
                good_cells = [f"<td>{_num(good.get('goodput_rps'), '{:.2f}')}</td>",
                              f"<td>{_num(good.get('share'), '{:.0%}')}</td>"]
            else:
                good_cells = ['<td colspan="2">no SLOs given</td>']
            ttft = level.get("ttft_ms") or {}
            rows.append(
                f"<tr><td>{c}</td><td>{html.escape(label)}</td><td>{_num(level.get('scale', 1), '{}')}</td>"
                f"<td>{_num(level.get('requests'), '{}')}</td><td>{_num(level.get('requests_per_s'), '{:.2f}')}</td>"
                f"<td>{_num(level.get('output_tokens_per_s'))}</td><td>{_num(ttft.get('p99'))}</td>"
                + "".join(engine_cells) + "".join(good_cells) + "</tr>")
    return rows


_ENGINE_HEAD = ("<tr><th>concurrency</th><th>run</th><th>scale</th><th>requests</th><th>req/s</th>"
                "<th>output tok/s</th><th>TTFT p99 (ms)</th><th>waiting mean / max</th><th>running mean / max</th>"
                "<th>KV cache mean / max</th><th>preemptions</th><th>goodput (req/s)</th><th>within SLOs</th></tr>")


def engine_html(runs: Sequence[tuple[str, Mapping[str, Any] | None]], *, heading: str = "h2") -> str:
    """The engine metrics and goodput table; empty when no level of any run has either."""
    has = any(lv.get("engine_metrics") or lv.get("goodput")
              for _, run in runs for lv in (run or {}).get("levels") or [])
    if not has:
        return ""
    slos = next((lv["goodput"].get("slos") for _, run in runs for lv in (run or {}).get("levels") or []
                 if isinstance(lv.get("goodput"), Mapping) and lv["goodput"].get("slos") is not None), None)
    note = (f"; goodput: requests/s that succeeded within every per-request limit {html.escape(json.dumps(slos))}"
            if slos is not None else "")
    return (f"<{heading}>Engine metrics and goodput</{heading}>\n<p>the engine's figures are vLLM's /metrics sampled "
            f"while each level ran (KV cache: share of blocks in use){note}</p>\n"
            f'<table id="engine" border="1" cellpadding="4">{_ENGINE_HEAD}{"".join(engine_rows(runs))}</table>')


def release_html(release: Mapping[str, Any] | None) -> str:
    """The release decision: action, verdict, its reasons, the change against what serves and since the anchor."""
    if not release:
        return ""
    reasons = release.get("reasons") or []
    if isinstance(reasons, str):
        reasons = [reasons]
    items = "".join(f"<li>{html.escape(str(r))}</li>" for r in reasons)
    return (f'<table id="release" border="1" cellpadding="4">'
            f"<tr><th>decision</th><td>{html.escape(str(release.get('action', '-')))}</td></tr>"
            f"<tr><th>verdict</th><td>{html.escape(str(release.get('verdict', '-')))}</td></tr>"
            f"<tr><th>change against what serves (e2e, + slower)</th><td>{_pct(release.get('headline_change'))}</td></tr>"
            f"<tr><th>drift since the anchor (compounded)</th><td>{_pct(release.get('cumulative_change'))}</td></tr>"
            f"<tr><th>anchor run</th><td>{html.escape(str(release.get('anchor_run_id') or '-'))}</td></tr>"
            f"</table>\n" + (f"<ul>{items}</ul>" if items else ""))


def comparison_html(result: Mapping[str, Any], comparison: Mapping[str, Any] | None) -> str:
    """The comparison section: the release decision, the verdict table, candidate vs baseline quantiles per
    metric and level, and both arms' engine metrics and goodput. Empty without a comparison."""
    if not comparison:
        return ""
    baseline = comparison.get("baseline")
    judgement = comparison.get("judgement")
    out = ['<section id="comparison">']
    if baseline:
        out.append("<h2>Candidate against the serving app, in the same time window</h2>\n"
                   f"<p>baseline endpoint {html.escape(str(baseline.get('endpoint', '-')))}, model "
                   f"{html.escape(str(baseline.get('model', '-')))}; same prompts and seeds, the same load per "
                   "replica (the baseline's scale × the concurrency and the requests)</p>")
    else:
        out.append("<h2>Release decision</h2>")
    out.append(release_html(comparison.get("release")))
    if judgement:
        from raylift.measure.judgement import format_judgement

        try:
            table = format_judgement(judgement)
        except (KeyError, TypeError, ValueError) as exc:  # a judgement of another shape: say so, keep the page
            table = f"judgement not shown ({type(exc).__name__}: {exc}): {json.dumps(judgement, default=str)[:2000]}"
        out.append(f'<h3>Verdict: {html.escape(str(judgement.get("verdict", "-")))}</h3>\n'
                   f'<pre id="verdict">{html.escape(table)}</pre>')
    if baseline:
        head = "".join(f"<th>{arm} {q}</th>" for arm in ("baseline", "candidate")
                       for q in ("n", *(f"p{q}" for q in COMPARED_QUANTILES)))
        out.append("<h3>Per-request distributions</h3>\n"
                   f'<table id="quantiles" border="1" cellpadding="4"><tr><th>concurrency</th><th>metric</th>{head}'
                   f"<th>median change</th></tr>{''.join(_quantile_rows(result, baseline))}</table>")
        out.append(engine_html([("candidate", result), ("baseline", baseline)], heading="h3"))
    else:
        out.append(engine_html([("this run", result)], heading="h3"))
    out.append("</section>")
    return "\n".join(part for part in out if part)


def cold_start_html(cold: Mapping[str, Any] | None) -> str:
    """The cold start of each replica the deploy started, by phase (``raylift.serve.cold_start``: Ray's placement, Serve's
    constructor, vLLM's own timings; ``-`` where a replica's logs did not print a phase). Empty without one."""
    from raylift.serve.cold_start import LABELS, table_rows

    cold = cold or {}
    replicas = list(cold.get("replicas") or [])
    pods = pods_html(cold.get("pods") or [])
    if not replicas:
        return pods
    head, body = table_rows(replicas)
    header = "".join(f'<th title="{html.escape(LABELS.get(h, h))}">{html.escape(h)}</th>' for h in head)
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in body)
    legend = "".join(f"<li><code>{html.escape(h)}</code>: {html.escape(LABELS[h])}</li>" for h in head if h in LABELS)
    return (f'<h2>Cold start by phase (seconds)</h2>\n<p>each replica of app {html.escape(str(cold.get("app", "-")))} '
            "this deploy started; a phase is shown only where Ray, Serve, the app or vLLM timed it; outer spans "
            f'contain inner ones</p>\n<table id="cold-start" border="1" cellpadding="4"><tr>{header}</tr>{rows}'
            f"</table>\n<ul>{legend}</ul>{pods}")


def pods_html(pods: list[Mapping[str, Any]]) -> str:
    """The Ray pods an EKS deploy started, by phase (``raylift.kuberay.cold_start``: Kubernetes' own timestamps).
    Empty without any."""
    from raylift.kuberay.cold_start import PHASES

    if not pods:
        return ""
    header = "".join(f"<th>{html.escape(h)}</th>" for h in ("pod", "node type", "node", *PHASES, "total_s"))

    def cell(value: Any) -> str:
        return f"<td>{'-' if value is None else html.escape(str(value))}</td>"

    rows = "".join("<tr>" + "".join(cell(v) for v in (p.get("pod"), p.get("node_type"), p.get("node"),
                                                         *((p.get("phases_s") or {}).get(k) for k in PHASES),
                                                         p.get("total_s"))) + "</tr>" for p in pods)
    return ('<h2>Ray pods this deploy started, by phase (seconds)</h2>\n<p>from Kubernetes\' pod conditions: waiting '
            "for a node, init containers, pulling the image and starting, Ray ready</p>\n"
            f'<table id="cold-start-pods" border="1" cellpadding="4"><tr>{header}</tr>{rows}</table>')


def report_title(result: Mapping[str, Any]) -> str:
    """The page title: app, model and target, so a tab or a saved file says what was measured."""
    return (f"raylift benchmark: app {result.get('app', '-')}, model {result.get('model', '-')}, "
            f"target {result.get('target', '-')}")


def write_html(result: Mapping[str, Any], images: Sequence[Path], path: Path, *, title: str,
               peers: Sequence[Mapping[str, Any]] = (), comparison: Mapping[str, Any] | None = None,
               cold_start: Mapping[str, Any] | None = None, note: str | None = None) -> Path:
    """One HTML file with the table and the PNGs inlined (base64), viewable without a web server; with
    ``comparison`` (:func:`write_report`) its section after the table; with ``cold_start`` (the deploy's
    ``cold_start.json``) its table before the cost; ``note`` in place of the plots (why there are none)."""
    figures = "\n".join(
        f'<img alt="{html.escape(p.stem)}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in images
    )
    if note:
        figures = f'<p class="note">{html.escape(note)}</p>\n{figures}'.rstrip()
    profile = html.escape(json.dumps(result.get("profile", {})))
    judgement = ""
    side_by_side = bool(comparison and comparison.get("baseline"))
    if result.get("judgement") and not (side_by_side and comparison and comparison.get("judgement")):
        # the regression gate's verdict per metric and level (raylift.measure.judgement); a canary's is in its
        # comparison section
        from raylift.measure.judgement import format_judgement

        judgement = (f'<h2>Against the last good run: {html.escape(str(result["judgement"]["verdict"]))}</h2>\n'
                     f"<pre>{html.escape(format_judgement(result['judgement']))}</pre>")
    section = comparison_html(result, comparison) if comparison else engine_html([("this run", result)])
    section = "\n" + section if section else ""  # nothing new: the page as it always was
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} pre{{background:#f4f4f4;padding:1em}} img{{max-width:100%}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p>model <b>{html.escape(str(result.get("model", "")))}</b>, endpoint {html.escape(str(result.get("endpoint", "")))},
started {html.escape(str(result.get("started_at", "")))}</p>
<p>profile <code>{profile}</code></p>
<pre>{html.escape(format_table(result))}</pre>
{sweep_html(result)}
{judgement}{section}
{cold_start_html(cold_start)}
{cost_html(result, peers)}
{figures}
</body></html>
"""
    path.write_text(page)
    return path


def write_report(
    result: Mapping[str, Any],
    out_dir: str | Path,
    *,
    name: str = "benchmark",
    history: Sequence[Mapping[str, Any]] | None = None,
    peers: Sequence[Mapping[str, Any]] = (),
    comparison: Mapping[str, Any] | None = None,
    cold_start: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write ``<name>.json``, ``<name>.csv``, the PNGs and ``<name>.html`` under ``out_dir``.

    ``history`` (earlier results, oldest first; this run is appended if not last) adds the run-history
    plot. ``comparison`` (``{"baseline": the baseline arm's result or None, "judgement": Judgement.as_dict()
    or None, "release": the release decision or None}``, any of them missing) adds the comparison section
    (:func:`comparison_html`) and, with a baseline, the candidate-vs-baseline plot. ``cold_start`` (the deploy's
    replicas by phase) adds its table (:func:`cold_start_html`). Returns the paths by kind:
    json, csv, latency_png, throughput_png, [history_png], [comparison_png], html.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {
        "json": write_json(result, out / f"{name}.json"),
        "csv": write_csv(result, out / f"{name}.csv"),
    }
    plots = plots_available()
    if plots:
        paths["latency_png"] = plot_latency(result, out / f"{name}-latency.png")
        paths["throughput_png"] = plot_throughput(result, out / f"{name}-throughput.png")
    else:  # said in the task log and on the page, never silently missing
        import logging

        logging.getLogger(__name__).warning("%s", PLOTS_EXTRA_NOTE)
    if history and plots:
        runs = list(history)
        if runs[-1] is not result:
            runs.append(result)
        paths["history_png"] = plot_history(runs, out / f"{name}-history.png")
    baseline = (comparison or {}).get("baseline")
    if plots and baseline and compared_levels(result, baseline):
        paths["comparison_png"] = plot_comparison(result, baseline, out / f"{name}-comparison.png")
    images = [p for key, p in paths.items() if key.endswith("_png")]
    paths["html"] = write_html(result, images, out / f"{name}.html",
                               title=report_title(result) if result.get("app") else f"raylift benchmark: {name}",
                               peers=peers, comparison=comparison, cold_start=cold_start,
                               note=None if plots else PLOTS_EXTRA_NOTE)
    return paths


def stored_results(store: ObjectStore, runs_prefix: str) -> list[dict[str, Any]]:
    """Every run's ``benchmark.json`` under ``runs_prefix``, read once for the history plot and the cost table
    (on S3 each is a GET)."""
    return [store.read_json(key) or {} for key in store.list(runs_prefix) if key.endswith("/benchmark.json")]


def run_history(stored: Sequence[Mapping[str, Any]], result: Mapping[str, Any], *, limit: int = HISTORY_RUNS
                ) -> list[dict[str, Any]]:
    """Earlier results of the same model at the same endpoint, oldest first (at most ``limit``), among the
    ``stored`` results (:func:`stored_results`)."""
    runs = []
    for earlier in stored:
        same = earlier.get("model") == result.get("model") and earlier.get("endpoint") == result.get("endpoint")
        if same and earlier.get("levels") and earlier.get("started_at") != result.get("started_at"):
            runs.append(dict(earlier))
    runs.sort(key=lambda run: str(run.get("started_at", "")))
    return runs[-limit:]


def cost_peers(stored: Sequence[Mapping[str, Any]], result: Mapping[str, Any],
               last_good: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """What the report's cost table sets beside this run: the last good run, and the newest run of the same
    served model on each other target among the ``stored`` results (those sharing this store)."""
    peers: list[dict[str, Any]] = []
    if last_good and last_good.get("benchmark"):
        peers.append({"label": f"last good ({last_good.get('run_id', '')})", "result": last_good["benchmark"]})
    newest: dict[str, Mapping[str, Any]] = {}
    for run in stored:
        target = run.get("target")
        if run.get("model") != result.get("model") or not target or target == result.get("target"):
            continue
        if str(run.get("started_at", "")) > str(newest.get(target, {}).get("started_at", "")):
            newest[target] = run
    peers += [{"label": f"last on {target}", "result": run} for target, run in sorted(newest.items())]
    return peers


def write_run_report(
    store: ObjectStore, run_prefix: str, result: Mapping[str, Any], *, history: Sequence[Mapping[str, Any]] = (),
    peers: Sequence[Mapping[str, Any]] = (), comparison: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Write the report files (:func:`write_report`, ``comparison`` included) into ``run_prefix`` of a model
    store (a local directory or S3), with the deploy's ``cold_start.json`` of the run where there is one; returns
    the store key of each file by kind."""
    cold_start = store.read_json(f"{run_prefix}/cold_start.json")
    with tempfile.TemporaryDirectory(prefix="raylift-report-") as tmp:
        paths = write_report(result, tmp, history=[*history, result] if history else None, peers=peers,
                             comparison=comparison, cold_start=cold_start)
        keys = {}
        for kind, path in paths.items():
            keys[kind] = f"{run_prefix}/{path.name}"
            store.upload_file(keys[kind], path)
    return keys


def report_url(run_folder: str, base_url: str = "") -> str:
    """Where the Airflow api-server shows a run's report (the raylift plugin's reports app);
    ``base_url`` is the api-server's (empty: a path on the same server)."""
    from raylift.config import REPORTS_URL_PREFIX

    return f"{base_url.rstrip('/')}{REPORTS_URL_PREFIX}/runs/{quote(run_folder, safe='')}/{REPORT_PAGE}"
