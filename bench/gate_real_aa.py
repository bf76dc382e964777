"""The release gate's error rates on real replicas (issue 45): A/A and slower canaries on the real local stack.

One local Ray cluster serves the tiny model (``raylift_deploy`` through ``airflow dags test``, the product's
first deploy); a client sends one chat request every 2 s to the serving app the whole time. Then, per release,
the canary path's own steps (``raylift.release.canary.plan_canary`` / ``with_canary`` / ``without_canary``, Serve's
REST API, ``raylift.measure.runner.run_side_by_side`` with the DAG's default benchmark Params,
``raylift.release.gates.assess``, ``raylift.release.decide``) with one arm more:

- ``candidate``: the release as the canary app (1 fresh replica, no user traffic);
- ``serving``: the serving app, carrying the live client's requests (today's baseline arm);
- ``fresh``: a fresh replica of the serving config started beside the canary (Kayenta's baseline: as new as
  the canary, and no user traffic).

All three are measured in the same rounds with the same prompts. The candidates rotate: ``copy`` (the serving
config itself), ``seed`` (new weights of the same shape: the tiny model with another seed) and ``slower`` (a
real slower model: the tiny model with more layers, ``--slow-layers``). Each release is judged both ways
(candidate vs serving, candidate vs fresh) and the A/A pair (fresh vs serving) is kept, so the gate designs are
compared on the very same replicas; ``gate`` is raylift's gate as it ships (candidate vs the fresh replica, and a
pilot that ``raylift.release.confirmation_requests`` finds unclear measured again, the same two arms at 4x the
requests, which decides; ``confirmed`` says when). Every arm's per-request samples go to
``bench/results/gate_real_aa_samples.json.gz`` (what ``bench/gate_calibration.py`` fits the simulation's noise
model to); the verdicts, headline changes and exact (Clopper-Pearson) intervals to
``bench/results/gate_real_aa.json``.

    .cache/venvs/control/bin/python bench/gate_real_aa.py [--same 30 --slow 10]

84 s a release on 2 cores (two engine starts, three arms benchmarked; 2026-12-02): about an hour for 40.
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


def release(target: Any, kind: str, model_path: str | None, client: Client) -> tuple[dict[str, Any], dict[str, Any]]:
    from raylift.config import DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S, DEFAULT_REQUESTS_PER_LEVEL
    from raylift.measure.runner import Arm, run_side_by_side
    from raylift.release.canary import fresh_baseline_app, plan_canary, with_canary, without_canary
    from raylift.release.decision import CONFIRM_FACTOR
    from raylift.serve.config import app_by_name, merge_app
    from raylift.serve.placement import arms_placement

    current = target.current_serve_config()
    serving = app_by_name(current, APP)
    plan = plan_canary(candidate_app(serving, model_path), current, APP, lambda app, others: None)
    fresh = fresh_baseline_app(copy.deepcopy(serving), APP)  # the product's baseline app, of the serving config
    config = merge_app(with_canary(current, plan, {}), fresh, defaults={})
    failed_before, t0 = len(client.failures), time.monotonic()
    target.apply_serve_config(config)
    names = [plan.canary["name"], fresh["name"]]
    started_s = wait_apps(target, names, running=True)
    nodes = replica_nodes(target)  # which Ray node each arm's replica got (Ray's scheduler chose)
    placed = arms_placement(target.serve_dashboard().serve_applications().get("applications") or {},
                            plan.canary["name"], fresh["name"])  # what the product's gate reads
    favours = placed.favoured if placed is not None else None
    serve = client.url
    candidate_arm = Arm(f"{serve}{plan.canary['route_prefix']}", MODEL)
    fresh_arm = Arm(f"{serve}{fresh['route_prefix']}", MODEL)
    arms = run_side_by_side(
        {"candidate": candidate_arm, "serving": Arm(serve, MODEL), "fresh": fresh_arm},
        MODEL, profile="smoke", concurrency=[1, 4], requests_per_level=DEFAULT_REQUESTS_PER_LEVEL,
        max_seconds_per_level=DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S, warmup_requests=0, engine_metrics=False)
    vs_fresh = judged(arms["candidate"], arms["fresh"], favours=favours)
    confirmed = None
    if vs_fresh["confirm_requests"]:  # raylift's gate: an unclear pilot, the same two arms again at 4x the requests
        again = run_side_by_side(
            {"candidate": candidate_arm, "fresh": fresh_arm},
            MODEL, profile="smoke", concurrency=[1, 4], requests_per_level=vs_fresh["confirm_requests"],
            max_seconds_per_level=DEFAULT_BENCHMARK_LEVEL_TIMEOUT_S * CONFIRM_FACTOR, warmup_requests=0,
            engine_metrics=False)
        confirmed = judged(again["candidate"], again["fresh"], vs_fresh["confirm_requests"], favours)
    bench_s = time.monotonic() - t0 - started_s
    now = target.current_serve_config()
    after = without_canary(now, plan)
    after["applications"] = [a for a in after["applications"] if a.get("name") != fresh["name"]]
    target.apply_serve_config(after)
    wait_apps(target, names, running=False)
    row = {"kind": kind, "start_s": round(started_s, 1), "bench_s": round(bench_s, 1),
           "nodes": {"serving": nodes.get(APP), "candidate": nodes.get(plan.canary["name"]),
                     "fresh": nodes.get(fresh["name"])},
           "placement": placed.as_dict() if placed is not None else None,
           "seconds": round(time.monotonic() - t0, 1), "client_failed": len(client.failures) - failed_before,
           "vs_serving": judged(arms["candidate"], arms["serving"]),
           "vs_fresh": vs_fresh,
           "gate": {**(confirmed or vs_fresh), "confirmed": confirmed is not None},
           "aa_fresh_vs_serving": judged(arms["fresh"], arms["serving"])}
    samples = {"kind": kind, **{a: levels_samples(r) for a, r in arms.items()}}
    return row, samples


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    same = [r for r in rows if r["kind"] in ("copy", "seed")]
    slow = [r for r in rows if r["kind"] == "slower"]
    for design in ("vs_serving", "vs_fresh", "gate"):
        if not all(design in r for r in rows):
            continue
        fr = sum(1 for r in same if r[design]["action"] != "promote")
        det = sum(1 for r in slow if r[design]["action"] != "promote")
        heads_same = [r[design]["headline_change"] for r in same if r[design]["headline_change"] is not None]
        heads_slow = [r[design]["headline_change"] for r in slow if r[design]["headline_change"] is not None]
        out[design] = {
            "same_speed_rejected": fr, "same_speed_releases": len(same),
            "same_speed_rejected_rate": fr / len(same) if same else None,
            "same_speed_rejected_interval_95": clopper_pearson(fr, len(same)) if same else None,
            "slower_rejected": det, "slower_releases": len(slow),
            "slower_rejected_rate": det / len(slow) if slow else None,
            "slower_rejected_interval_95": clopper_pearson(det, len(slow)) if slow else None,
            "same_speed_headline_mean": _mean(heads_same), "same_speed_headline_sd": _sd(heads_same),
            **({"confirmed_same_speed": sum(1 for r in same if r[design]["confirmed"]),
                "confirmed_slower": sum(1 for r in slow if r[design]["confirmed"])} if design == "gate" else {}),
            "slower_headline_mean": _mean(heads_slow), "slower_headline_sd": _sd(heads_slow),
        }
    aa = [r["aa_fresh_vs_serving"]["headline_change"] for r in rows if r["aa_fresh_vs_serving"]["headline_change"]
          is not None]
    out["aa_fresh_vs_serving"] = {"headline_mean": _mean(aa), "headline_sd": _sd(aa),
                                  "rejected": sum(1 for r in rows if r["aa_fresh_vs_serving"]["action"] != "promote"),
                                  "releases": len(rows)}
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _sd(xs: list[float]) -> float | None:
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--same", type=int, default=30, help="same-speed releases (copy and seed, alternating)")
    ap.add_argument("--slow", type=int, default=10, help="slower releases")
    ap.add_argument("--slow-layers", type=int, default=8, help="layers of the slower model (the serving one has 2)")
    ap.add_argument("--workers", type=int, default=2,
                    help="Ray worker nodes beside the head (2: the serving app, the canary and the fresh baseline "
                         "can each have a node of their own)")
    ap.add_argument("--out", type=Path, default=OUT, help="the results JSON NAME.json (its samples beside it, NAME_samples.json.gz)")
    args = ap.parse_args()
    from raylift.targets.local import LocalTarget

    tiny = Path(os.environ.get("RAYLIFT_TINY_MODEL", ROOT / ".cache/tiny-llama"))
    home = Path(tempfile.mkdtemp(prefix="raylift-aa-", dir=ROOT / "var"))
    env = stack_env(home, base=BASE)
    os.environ.update({k: v for k, v in env.items() if k.startswith("RAYLIFT_")})  # this process reads the stack too
    assert airflow(env, "db", "migrate", timeout=300).returncode == 0
    conf = {**stack_conf(tiny), "workers": args.workers}
    serve = f"http://127.0.0.1:{BASE + 10}"
    order = plan_order(args.same, args.slow)
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        if not first_deploy(env, home, conf):
            return 1
        target = LocalTarget()  # the stack's local target: its dashboard, token and Serve waits
        models = home / "models"
        slow_model = models / f"tiny-{args.slow_layers}-layers"
        make_model(slow_model, seed=0, layers=args.slow_layers)
        with Client(serve) as client, gzip.open(samples_path(args.out), "wt") as samples_out:
            time.sleep(5)
            for i, kind in enumerate(order):
                path = None
                if kind == "seed":
                    path = str(make_model(models / f"tiny-seed-{i}", seed=100 + i))
                elif kind == "slower":
                    path = str(slow_model)
                row, samples = release(target, kind, path, client)
                rows.append({"i": i, **row})
                samples_out.write(json.dumps({"i": i, **samples}) + "\n")
                print(json.dumps({"i": i, "kind": kind, "seconds": row["seconds"], "nodes": row["nodes"],
                                  **{d: (row[d]["action"], row[d]["verdict"], _r(row[d]["headline_change"]))
                                     for d in ("vs_serving", "vs_fresh", "gate", "aa_fresh_vs_serving")},
                                  "confirmed": row["gate"]["confirmed"]}), flush=True)
                write(rows, args, client, t0)
            client_total = {"sent": client.sent, "failed": len(client.failures), "failures": client.failures[:10]}
        write(rows, args, client, t0, client_total)
    finally:
        stop_stack(env)
    print(json.dumps(summary(rows), indent=1))
    return 0


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def plan_order(same: int, slow: int) -> list[str]:
    """Same-speed releases alternating copy and seed, a slower one spread evenly among them."""
    same_kinds = ["copy" if i % 2 == 0 else "seed" for i in range(same)]
    order: list[str] = []
    every = max(1, (same + slow) // max(1, slow))
    while same_kinds or slow:
        if slow and (len(order) % every == every - 1 or not same_kinds):
            order.append("slower")
            slow -= 1
        else:
            order.append(same_kinds.pop(0))
    return order


def write(rows: list[dict[str, Any]], args: argparse.Namespace, client: Client, t0: float,
          client_total: dict[str, Any] | None = None) -> None:
    out = {"what": "canary releases on the real local stack under a live client (1 chat request / 2 s on the "
                   "serving app); each judged against the serving app and against a fresh replica of the serving "
                   "config started beside it; the A/A pair fresh vs serving kept",
           "date": datetime.now(UTC).isoformat(timespec="seconds"),
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip(),
           "load_average": os.getloadavg(), "slow_layers": args.slow_layers, "workers": args.workers,
           "seconds": round(time.monotonic() - t0), "summary": summary(rows), "releases": rows,
           "client": client_total or {"sent": client.sent, "failed": len(client.failures)}}
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
