"""The release gate's error rates on real replicas (issues 45 and 56): releases through the DAG on make demo's stack.

Issue 56's harness. One local Ray cluster of ``make demo``'s shape (one node, 2 logical CPUs, default Params)
serves the tiny model (``raylift_deploy`` through ``airflow dags test``, the product's first deploy); a client sends
one chat request every 2 s to the serving app the whole time. Then every release goes through the DAG's own steps
(``airflow dags test raylift_deploy`` with ``release: canary``, ``on_inconclusive: pass``): the canary beside a
fresh replica of the anchor's config (given room by the local target), measured in the design
``raylift.release.measured.measurement_design`` chooses (interleaved here: one machine), judged by the gate that
knows its noise (the app's A/A log). Each row is what the run's own records say (``release.json``,
``benchmark.json``): action, verdict, headline, design, baseline arm, the A/A spread and its source.

Kinds: ``copy`` (the serving weights, a harmless engine change so the replicas restart: a same-speed canary),
``seed`` (new weights of the same shape), ``slower`` (the tiny model with ``--slow-layers`` layers; its slowdown
measured alone first, each arm alone), ``blue_green`` (the serving config on the other colour's cluster from
``--bg-runtime``: an A/A across two clusters). ``--releases N`` splits N in the issue's mix (30 : 10 : 10).

Beside the DAG, on ``--paired`` of the canary releases, both measurement designs on the same replicas
(:func:`paired_release`: a canary and its fresh baseline, measured interleaved and concurrently in a random order),
so the two designs are compared on the same stack. The summary gives each target with its exact (Clopper-Pearson)
interval, the releases the gate decided and those it did not (named, with the spread that made them so), and what
each design's A/A bias and spread were. Results: ``bench/results/gate_real_aa.json``; the paired releases'
per-request samples beside it (``..._samples.json.gz``, what ``bench/gate_calibration.py --design`` fits).

    .cache/venvs/control/bin/python bench/gate_real_aa.py --releases 50 [--bg-runtime PY]   # about 2 h
    .cache/venvs/control/bin/python bench/gate_real_aa.py --releases 5 --paired 2           # a short run
    .cache/venvs/control/bin/python bench/gate_real_aa.py --releases 50 --plan-only --out /tmp/plan.json

What an idle arm costs: the fresh baseline replica's processes (Serve's replica ``pid`` and its children) sampled
for ``--idle-s`` before the slower model's first measurement (``slower_alone.idle_baseline_cpu_share``, a share of
one core; issue 56's probe read 2.2 % for an idle engine, 1.1 % for its replica actor).
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from canary_release import (  # noqa: E402
    MODEL,
    ROOT,
    Client,
    airflow,
    first_deploy,
    make_model,
    newest,
    stack_conf,
    stack_env,
    stop_stack,
)

BASE = 36000  # apart from every test stack and above Ray's worker ports (10002-19999): it can run beside the suite
APP = "llm"
OUT = ROOT / "bench/results/gate_real_aa.json"


def samples_path(out: Path) -> Path:
    """Where a run whose results go to ``out`` (``NAME.json``) keeps its per-request samples: ``NAME_samples.json.gz``
    (what ``gate_calibration.py --source`` reads)."""
    return out.with_name(out.stem + "_samples.json.gz")


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of k successes in n trials."""
    from scipy.stats import beta

    a = 1 - confidence
    low = 0.0 if k == 0 else float(beta.ppf(a / 2, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(1 - a / 2, k + 1, n - k))
    return low, high


def candidate_app(serving: Mapping[str, Any], model_path: str | None) -> dict[str, Any]:
    app = copy.deepcopy(dict(serving))
    if model_path is not None:  # the model is the app's argument; the deployments keep their options
        app["args"] = {**app.get("args", {}), "model": model_path}
    return app


def wait_apps(target: Any, names: list[str], *, running: bool, timeout_s: float = 600) -> float:
    """The deploy operator's own waits (the local target's Serve triggers), blocking here; the seconds taken."""
    from raylift.triggers.serve import ServeApplicationGoneTrigger

    t0 = time.monotonic()
    trigger = (target.deploy_trigger(app_names=names, timeout_s=timeout_s) if running  # deploys since the write
               else ServeApplicationGoneTrigger(dashboard_url=target.serve_dashboard_url(), app_names=names,
                                                timeout_s=timeout_s, **target.dashboard_trigger_auth()))
    event = trigger.wait()
    if event.get("status") != "success":
        raise RuntimeError(f"Serve apps {names} (running={running}): {event}")
    return time.monotonic() - t0


def replica_nodes(target: Any) -> dict[str, list[str]]:
    """``{app: [node id prefix of each replica]}`` as Serve reports them."""
    apps = (target.serve_dashboard().serve_applications().get("applications") or {})
    return {name: sorted(str(r.get("node_id") or "")[:8] for dep in (app.get("deployments") or {}).values()
                         for r in dep.get("replicas") or [])
            for name, app in apps.items()}


def judged(result: Mapping[str, Any], baseline: Mapping[str, Any], requests_per_level: int = 128,
           favours: str | None = None) -> dict[str, Any]:
    """The gate's judgement and decision of ``result`` against ``baseline`` (a single release: no chain), and the
    requests per level the gate would measure it again with (``confirm_requests``; None: it decides).
    ``favours``: the arm the two arms' Ray placement favours (``raylift.serve.placement``), as the gate reads it."""
    from raylift.config import (
        DEFAULT_MAX_CUMULATIVE_REGRESSION,
        DEFAULT_MAX_REGRESSION,
        DEFAULT_REGRESSION_CONFIDENCE,
    )
    from raylift.release.decision import ReleaseEvidence, confirmation_requests, decide
    from raylift.release.gates import assess, merged_slos

    baseline = {**baseline, "model": result.get("model")}
    judgement, violations = assess(result, merged_slos({}), baseline, max_regression=DEFAULT_MAX_REGRESSION,
                                   confidence=DEFAULT_REGRESSION_CONFIDENCE)
    evidence = ReleaseEvidence(
        first_deploy=False, smoke_passed=True,
        slo_violations=tuple(v.message for v in violations if v.kind != "regression"),
        judgement=judgement.as_dict(), anchor_links=(), on_inconclusive="pass", placement_favours=favours,
        max_cumulative_regression=DEFAULT_MAX_CUMULATIVE_REGRESSION)
    decision = decide(evidence)
    metrics = [{"metric": m["metric"], "concurrency": m["concurrency"], "verdict": m["verdict"],
                "change": m.get("change"), "low": m.get("low"), "high": m.get("high")}
               for m in judgement.as_dict()["metrics"]]
    return {"action": decision.action, "verdict": decision.verdict, "headline_change": decision.headline_change,
            "metrics": metrics, "confirm_requests": confirmation_requests(judgement.as_dict(), requests_per_level)}


def levels_samples(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [{k: lv.get(k) for k in ("concurrency", "samples", "rounds", "requests", "errors")}
            for lv in result.get("levels", [])]


def replica_pids(target: Any, app: str) -> list[int]:
    """The process ids of ``app``'s running replicas, as Serve's status reports them (``ReplicaDetails.pid``)."""
    apps = target.serve_dashboard().serve_applications().get("applications") or {}
    return [int(r["pid"]) for dep in ((apps.get(app) or {}).get("deployments") or {}).values()
            for r in dep.get("replicas") or [] if r.get("pid") and r.get("state", "RUNNING") == "RUNNING"]


def idle_cpu_share(pids: list[int], seconds: float) -> float | None:
    """What idle replicas cost: the CPU seconds of their processes and every child (the engine core) over
    ``seconds`` of wall time, as a share of one core (None: no process found)."""
    import psutil

    def cpu() -> float:
        total = 0.0
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                for p in (proc, *proc.children(recursive=True)):
                    t = p.cpu_times()
                    total += t.user + t.system
            except psutil.Error:
                continue
        return total

    if not pids:
        return None
    before, t0 = cpu(), time.monotonic()
    time.sleep(seconds)
    return (cpu() - before) / (time.monotonic() - t0)


def paired_release(target: Any, kind: str, model_path: str | None, client: Client, *, seed: int,
                   requests_per_level: int, idle_s: float = 0.0) -> dict[str, Any]:
    """Both measurement designs on the same replicas of one release: the canary path's own steps
    (``plan_canary`` with the local target's baseline room, ``with_canary``, the fresh baseline of the serving
    config), then the canary and its fresh baseline measured interleaved (each alone, RMIT) and concurrently (today's
    rounds), in a random order of the two designs; each judged as the gate judges (no chain). The serving app keeps
    the live client's traffic; it is not an arm here (that design is known to be biased: issue 45)."""
    import random

    from raylift.config import DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S
    from raylift.measure.runner import CONCURRENT, INTERLEAVED, Arm, run_side_by_side
    from raylift.release.canary import plan_canary, with_baseline, with_canary, without_canary
    from raylift.serve.config import app_by_name

    current = target.current_serve_config()
    serving = app_by_name(current, APP)
    plan = plan_canary(candidate_app(serving, model_path), current, APP, lambda app, others: None,
                       anchor_app=copy.deepcopy(serving), room=getattr(target, "baseline_arm_room", None))
    assert plan.baseline is not None, plan.baseline_note
    config = with_baseline(with_canary(current, plan, {}), plan)
    failed_before, t0 = len(client.failures), time.monotonic()
    target.apply_serve_config(config)
    names = [plan.canary["name"], plan.baseline["name"]]
    started_s = wait_apps(target, names, running=True)
    nodes = replica_nodes(target)
    idle = idle_cpu_share(replica_pids(target, plan.baseline["name"]), idle_s) if idle_s > 0 else None
    serve = client.url
    arms = {"candidate": Arm(f"{serve}{plan.canary['route_prefix']}", MODEL),
            "baseline": Arm(f"{serve}{plan.baseline['route_prefix']}", MODEL)}
    designs = [INTERLEAVED, CONCURRENT]
    random.Random(seed).shuffle(designs)
    out: dict[str, Any] = {"design_order": designs}
    samples: dict[str, Any] = {}
    for design in designs:
        measured = run_side_by_side(arms, MODEL, profile="smoke", concurrency=[1, 4],
                                    requests_per_level=requests_per_level,
                                    max_seconds_per_level=DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S, warmup_requests=0,
                                    engine_metrics=False, design=design, seed=seed)
        out[design] = judged(measured["candidate"], measured["baseline"], requests_per_level)
        samples[design] = {a: levels_samples(r) for a, r in measured.items()}
    after = without_canary(target.current_serve_config(), plan)
    after["applications"] = [a for a in after["applications"] if a.get("name") != plan.baseline["name"]]
    target.apply_serve_config(after)
    wait_apps(target, names, running=False)
    return {**out, "kind": kind, "start_s": round(started_s, 1), "idle_baseline_cpu_share": idle, "nodes": {
                "serving": nodes.get(APP), "candidate": nodes.get(plan.canary["name"]),
                "baseline": nodes.get(plan.baseline["name"])},
            "seconds": round(time.monotonic() - t0, 1), "client_failed": len(client.failures) - failed_before,
            "samples": samples}


def release_conf(base: Mapping[str, Any], kind: str, i: int, *, model_path: str | None,
                 bg_runtime: str | None, serving_runtime: str | None = None) -> dict[str, Any]:
    """The DAG run's conf for release ``i`` of ``kind``: default Params but the stack's own (make demo's shape, one
    node), ``release: canary``, ``on_inconclusive: pass`` (a scheduled release has nobody to answer a hold).
    ``copy``: the serving weights with a harmless engine change (vLLM's sampling ``seed``: the replicas restart, so
    the release is a canary of the same speed, not an unchanged redeploy); ``seed``: new weights of the same shape;
    ``slower``: the model with more layers; ``blue_green``: the serving config on the other runtime env's cluster
    (a runtime change: local's blue/green), an A/A across two clusters.

    ``serving_runtime`` is the runtime env serving now (``None``: the stack's default): every canary keeps it, so
    that only a ``blue_green`` release changes the runtime, to ``bg_runtime`` from the default and back again."""
    conf = {**base, "release": "canary", "on_inconclusive": "pass"}
    if serving_runtime is not None:
        conf["target_options"] = {"runtime_python": serving_runtime}
    if kind == "copy":
        conf["engine_args"] = {"seed": 1000 + i}
    elif kind in ("seed", "slower"):
        if model_path is None:
            raise ValueError(f"a {kind} release needs its model folder")
        conf["model_source"] = model_path
    elif kind == "blue_green":
        if not bg_runtime:
            raise ValueError("a blue/green release needs --bg-runtime (a second runtime env's Python)")
        if serving_runtime is None:
            conf["target_options"] = {"runtime_python": bg_runtime}
        else:
            conf.pop("target_options", None)  # back to the stack's default runtime env: a runtime change again
    else:
        raise ValueError(f"unknown release kind {kind!r}")
    return conf


def record_row(kind: str, record: Mapping[str, Any], benchmark: Mapping[str, Any]) -> dict[str, Any]:
    """What one DAG release decided, from its run's records (``release.json``, ``benchmark.json``)."""
    seen = record.get("evidence") or {}
    return {"kind": kind, "action": record.get("action"), "verdict": record.get("verdict"),
            "headline_change": record.get("headline_change"), "reasons": record.get("reasons"),
            "baseline_runs": seen.get("baseline_runs"), "baseline_note": record.get("baseline_note"),
            "design": benchmark.get("design") or record.get("design"),
            "aa_spread": seen.get("aa_spread"), "aa_source": seen.get("aa_source"),
            "noise": benchmark.get("noise"), "placement": benchmark.get("placement")}


def dag_release(env: dict[str, str], home: Path, conf: Mapping[str, Any], kind: str,
                client: Client) -> dict[str, Any]:
    """One release through the DAG's own steps (``airflow dags test raylift_deploy``), with the live client on."""
    failed_before, t0 = len(client.failures), time.monotonic()
    run = airflow(env, "dags", "test", "raylift_deploy", "--conf", json.dumps(conf))
    (home / "releases.log").open("a").write(run.stdout[-20000:] + run.stderr[-20000:])
    row = record_row(kind, newest(home, "release.json"), newest(home, "benchmark.json"))
    return {**row, "rc": run.returncode, "seconds": round(time.monotonic() - t0, 1),
            "client_failed": len(client.failures) - failed_before}


SAME_KINDS, SLOWER, BLUE_GREEN = ("copy", "seed"), "slower", "blue_green"
DECIDED = ("pass", "regressed", "cumulative regression")  # verdicts that are a decision, not an abstention
# the mix: 30 same speed (15 + 15), 10 slower, 10 blue/green A/A
MIX = {"same": 30, "slow": 10, "blue_green": 10}


def split_releases(n: int) -> dict[str, int]:
    """``n`` releases in the issue's proportions (30 : 10 : 10), at least one of each kind from 3 on."""
    if n < 1:
        raise ValueError(f"--releases must be at least 1, got {n}")
    total = sum(MIX.values())
    out = {k: round(n * v / total) for k, v in MIX.items()}
    if n >= 3:
        out = {k: max(1, v) for k, v in out.items()}
    out["same"] += n - sum(out.values())  # rounding's remainder goes to the same-speed releases
    return out


def plan_order(same: int, slow: int, blue_green: int = 0) -> list[str]:
    """Same-speed releases alternating copy and seed, the slower and blue/green ones spread evenly among them."""
    order = ["copy" if i % 2 == 0 else "seed" for i in range(same)]
    for kind, count in ((SLOWER, slow), (BLUE_GREEN, blue_green)):
        for j in range(count):
            order.insert(min(len(order), (j + 1) * (len(order) + 1) // (count + 1) + j), kind)
    return order


def _rates(rows: list[dict[str, Any]], rejected: Any) -> dict[str, Any]:
    k = sum(1 for r in rows if rejected(r))
    return {"rejected": k, "releases": len(rows), "rate": k / len(rows) if rows else None,
            "interval_95": clopper_pearson(k, len(rows)) if rows else None}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets of issue 56 from the DAG releases (``rows``) and the paired design comparison (``paired``)."""
    same = [r for r in rows if r["kind"] in SAME_KINDS]
    slow = [r for r in rows if r["kind"] == SLOWER]
    bg = [r for r in rows if r["kind"] == BLUE_GREEN]
    rolled_back = lambda r: r.get("action") == "roll_back"  # noqa: E731
    decided = [r for r in rows if r.get("verdict") in DECIDED]
    out: dict[str, Any] = {
        "same_speed": {**_rates(same, rolled_back), "target": "at most 1 rejected of 30"},
        "slower": {**_rates(slow, rolled_back), "target": "at least 9 rejected of 10"},
        "blue_green_aa": {**_rates(bg, rolled_back), "target": "at most 1 rejected of 10"},
        # where no design can meet a target here, the gate must abstain rather than decide wrongly
        "decided": len(decided),
        "decided_wrongly": {
            "same_speed_rolled_back": sum(1 for r in decided if r["kind"] in SAME_KINDS + (BLUE_GREEN,)
                                          and r["action"] == "roll_back"),
            "slower_promoted_as_pass": sum(1 for r in decided if r["kind"] == SLOWER and r["verdict"] == "pass")},
        "undecided": [{"i": r.get("i"), "kind": r["kind"], "verdict": r.get("verdict"),
                       "headline_change": r.get("headline_change"), "aa_spread": r.get("aa_spread"),
                       "aa_source": r.get("aa_source")} for r in rows if r.get("verdict") not in DECIDED],
        "baseline_runs": {b: sum(1 for r in rows if r.get("baseline_runs") == b)
                          for b in sorted({str(r.get("baseline_runs")) for r in rows})},
        "designs": {d: sum(1 for r in rows if (r.get("design") or {}).get("name") == d)
                    for d in sorted({str((r.get("design") or {}).get("name")) for r in rows})},
    }
    paired = [r["paired"] for r in rows if r.get("paired")]
    if paired:
        out["paired"] = {}
        for design in ("interleaved", "concurrent"):
            p_same = [p for p in paired if p["kind"] in SAME_KINDS]
            p_slow = [p for p in paired if p["kind"] == SLOWER]
            heads = [p[design]["headline_change"] for p in p_same if p[design]["headline_change"] is not None]
            out["paired"][design] = {
                "same_speed": _rates(p_same, lambda p, d=design: p[d]["action"] == "roll_back"),
                "slower": _rates(p_slow, lambda p, d=design: p[d]["action"] == "roll_back"),
                # the design's A/A: a same-speed canary against a fresh replica of its config; bias and spread
                "same_speed_headline_mean": _mean(heads), "same_speed_headline_sd": _sd(heads),
                "slower_headline_mean": _mean([p[design]["headline_change"] for p in p_slow
                                               if p[design]["headline_change"] is not None])}
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _sd(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--releases", type=int, default=sum(MIX.values()),
                    help="releases in all, in the issue's mix 30 same speed : 10 slower : 10 blue/green A/A "
                         "(e.g. --releases 5 for a short run); --same/--slow/--blue-green override a kind's count")
    ap.add_argument("--same", type=int, default=None, help="same-speed releases (copy and seed, alternating)")
    ap.add_argument("--slow", type=int, default=None, help="slower releases")
    ap.add_argument("--blue-green", type=int, default=None, help="local blue/green A/A releases (needs --bg-runtime)")
    ap.add_argument("--paired", type=int, default=10,
                    help="of the canary releases, how many also measure both designs (interleaved and concurrent) "
                         "on the same replicas")
    ap.add_argument("--slow-layers", type=int, default=6, help="layers of the slower model (the serving one has 2)")
    ap.add_argument("--workers", type=int, default=0,
                    help="Ray worker nodes beside the head (0: make demo's own cluster shape, one node)")
    ap.add_argument("--bg-runtime", default=os.environ.get("RAYLIFT_BG_RUNTIME_PYTHON"),
                    help="a second runtime env's Python for the blue/green releases (without it they are skipped, "
                         "and the results say so)")
    ap.add_argument("--idle-s", type=float, default=30.0,
                    help="seconds an idle fresh baseline replica's CPU is sampled for, once, before the first "
                         "measurement: what an idle arm costs (a share of one core)")
    ap.add_argument("--seed", type=int, default=56, help="seeds the paired designs' order and their rounds' orders")
    ap.add_argument("--out", type=Path, default=OUT,
                    help="the results JSON NAME.json (its samples beside it, NAME_samples.json.gz)")
    ap.add_argument("--plan-only", action="store_true",
                    help="write the planned releases (kinds, in order) to --out and stop: no stack is started")
    ap.add_argument("--summarize", type=Path, nargs="+", default=None,
                    help="results JSONs this script wrote: the summary computed again from their releases, to --out; "
                         "several runs (each its own stack, e.g. one a session) are pooled, each release tagged with "
                         "its run")
    args = ap.parse_args(argv)
    counts = split_releases(args.releases)
    args.same = counts["same"] if args.same is None else args.same
    args.slow = counts["slow"] if args.slow is None else args.slow
    args.blue_green = counts["blue_green"] if args.blue_green is None else args.blue_green
    if min(args.same, args.slow, args.blue_green, args.paired) < 0:
        ap.error("release counts must be 0 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.summarize is not None:  # the figures again from the runs' own records (no stack)
        pooled = pool_runs([(path, json.loads(path.read_text())) for path in args.summarize])
        write_results(args.out, pooled)
        print(json.dumps(pooled["summary"], indent=1))
        return 0
    if args.plan_only:
        order = plan_order(args.same, args.slow, args.blue_green)
        write_results(args.out, {**payload([], args, 0, 0, time.monotonic(), {}), "plan": order})
        print(json.dumps({"plan": order}))
        return 0
    from raylift.config import DEFAULT_REQUESTS_PER_LEVEL
    from raylift.targets.local import LocalTarget

    skipped = None
    if args.blue_green and not args.bg_runtime:
        skipped = (f"{args.blue_green} blue/green release(s) skipped: no --bg-runtime (a second runtime env's "
                   "Python, so that local releases blue/green)")
        args.blue_green = 0
    tiny = Path(os.environ.get("RAYLIFT_TINY_MODEL", ROOT / ".cache/tiny-llama"))
    home = Path(tempfile.mkdtemp(prefix="raylift-aa-", dir=ROOT / "var"))
    env = stack_env(home, base=BASE)
    if args.blue_green:
        env["RAYLIFT_FRONT_PORT"] = str(BASE + 20)  # local blue/green needs raylift's front
    os.environ.update({k: v for k, v in env.items() if k.startswith("RAYLIFT_")})  # this process reads the stack too
    assert airflow(env, "db", "migrate", timeout=300).returncode == 0
    conf = {**stack_conf(tiny), "workers": args.workers, "on_inconclusive": "pass"}
    serve = f"http://127.0.0.1:{BASE + (20 if args.blue_green else 10)}"
    order = plan_order(args.same, args.slow, args.blue_green)
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    meta: dict[str, Any] = {"skipped": skipped, "commit": head_commit()}
    try:
        if not first_deploy(env, home, conf):
            return 1
        target = LocalTarget()  # the stack's local target: its dashboard, token, Serve waits and baseline room
        models = home / "models"
        slow_model = models / f"tiny-{args.slow_layers}-layers"
        make_model(slow_model, seed=0, layers=args.slow_layers)
        with Client(serve) as client, gzip.open(samples_path(args.out), "wt") as samples_out:
            time.sleep(5)
            if args.slow:  # the slower model's slowdown measured alone first (each arm alone: interleaved)
                alone = paired_release(target, SLOWER, str(slow_model), client, seed=args.seed,
                                       requests_per_level=DEFAULT_REQUESTS_PER_LEVEL, idle_s=args.idle_s)
                meta["slower_alone"] = {k: v for k, v in alone.items() if k != "samples"}
            paired_left = args.paired
            serving_runtime: str | None = None  # the runtime env serving: the stack's default first
            for i, kind in enumerate(order):
                path = None
                if kind == "seed":
                    path = str(make_model(models / f"tiny-seed-{i}", seed=100 + i))
                elif kind == SLOWER:
                    path = str(slow_model)
                run_conf = release_conf(conf, kind, i, model_path=path, bg_runtime=args.bg_runtime,
                                        serving_runtime=serving_runtime)
                row = {"i": i, **dag_release(env, home, run_conf, kind, client)}
                if kind == BLUE_GREEN and row.get("action") == "promote":  # the other runtime env serves now
                    serving_runtime = (run_conf.get("target_options") or {}).get("runtime_python")
                if kind != BLUE_GREEN and paired_left > 0:
                    paired_left -= 1
                    target = LocalTarget()  # bound to the serving colour's cluster: a blue/green promote moves it
                    paired = paired_release(target, kind, path, client, seed=args.seed + i,
                                            requests_per_level=DEFAULT_REQUESTS_PER_LEVEL)
                    samples_out.write(json.dumps({"i": i, "kind": kind, **paired.pop("samples")}) + "\n")
                    row["paired"] = paired
                rows.append(row)
                print(json.dumps({k: row.get(k) for k in ("i", "kind", "action", "verdict", "headline_change",
                                                          "aa_spread", "seconds", "client_failed")}), flush=True)
                write_results(args.out, payload(rows, args, client.sent, len(client.failures), t0, meta))
            meta["client_failures"] = client.failures[:10]
        write_results(args.out, payload(rows, args, client.sent, len(client.failures), t0, meta))
    finally:
        stop_stack(env)
    print(json.dumps(summary(rows), indent=1))
    return 0


def payload(rows: list[dict[str, Any]], args: argparse.Namespace, sent: int, failed: int, t0: float,
            meta: Mapping[str, Any]) -> dict[str, Any]:
    """The results file's content: what ran, the targets' figures (:func:`summary`), every release, the client."""
    return {"what": "issue 56: canary releases through raylift_deploy's own steps on make demo's cluster shape "
                    "(default Params; baseline: a fresh replica of the anchor's config with the local room; design "
                    "chosen by raylift.release.measured), a live client on the serving app throughout; on "
                    f"{args.paired} of them both designs (interleaved, concurrent) on the same replicas",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "commit": meta.get("commit") or head_commit(),
            "load_average": os.getloadavg(), "args": {k: (str(v) if isinstance(v, Path) else v)
                                                      for k, v in vars(args).items()},
            "seconds": round(time.monotonic() - t0), "summary": summary(rows), **dict(meta), "releases": rows,
            "client": {"sent": sent, "failed": failed}}


def pool_runs(runs: list[tuple[Path, Mapping[str, Any]]]) -> dict[str, Any]:
    """One results file from one run (as it was, its summary computed again) or from several: every release of
    each, tagged with its run (``run``: the file's name) and renumbered in order, the summary over all of them, and
    each run's own header (date, commit, args, client, load) under ``runs``. Each run had its own stack, so the
    gate's A/A log (the spread it knows) starts again in each; the releases are pooled as independent trials."""
    if len(runs) == 1:
        earlier = runs[0][1]
        return {**earlier, "summary": summary(list(earlier["releases"]))}
    rows: list[dict[str, Any]] = []
    headers = []
    for path, run in runs:
        for row in run["releases"]:
            rows.append({**row, "run": path.name, "run_i": row.get("i"), "i": len(rows)})
        headers.append({"run": path.name, **{k: run.get(k) for k in ("date", "commit", "args", "seconds",
                                                                        "load_average", "client", "skipped",
                                                                        "slower_alone", "client_failures")}})
    client = {"sent": sum(int((r.get("client") or {}).get("sent") or 0) for _, r in runs),
              "failed": sum(int((r.get("client") or {}).get("failed") or 0) for _, r in runs)}
    return {"what": runs[0][1].get("what"), "pooled_from": [path.name for path, _ in runs],
            "summary": summary(rows), "runs": headers, "releases": rows, "client": client}


def head_commit() -> str:
    """The checkout's commit, read when the run starts (``meta["commit"]``): a run takes hours, and what it measured
    is the code it started with, not the HEAD when a later release's row is written."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()


def write_results(out: Path, content: Mapping[str, Any]) -> None:
    """Write the results whole (a temp file renamed), so a run stopped midway leaves the last complete file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(content, indent=1, default=str))
    tmp.replace(out)


if __name__ == "__main__":
    sys.exit(main())
