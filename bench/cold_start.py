"""Cold start, three ways, alternating on one machine (issue 28): plain vLLM's own start, raylift's first deploy of a
fresh checkout, and raylift's redeploy of a new model version, each with its phases.

Each round runs the three in this order, so machine drift falls on all of them alike:

1. **plain vLLM**: its API server (``python -m vllm.entrypoints.openai.api_server``, what ``vllm serve`` runs) on the
   tiny model with llm-cpu.yaml's engine options and env vars, its default weight loader (the folder is local):
   spawn to ``/health`` 200 (``ready_s``), and to the first token of a streamed completion sent right then
   (``first_token_s``); phases from its own log lines (``raylift.serve.cold_start.parse_engine_log``).
2. **raylift, fresh checkout**: a new ``RAYLIFT_HOME`` (empty model store, no Ray cluster, a new Airflow DB migrated
   before the clock starts, as ``make demo``'s step 3) and ``airflow dags test raylift_deploy`` with the demo's conf:
   the run record's ``trigger_to_running_s`` and ``trigger_to_first_token_s`` (the smoke test's stream), and its
   replica's phases. The cluster start, the model staging and the artifact build are inside the figure.
3. **raylift, new model version**: on that stack, other weights (a new seed each round) under a new model folder, deployed
   ``release: direct`` (the version replaces the app in place; the canary path's gate is not what is timed here):
   the same figures. Then the stack is stopped.

Compile caches are the machine's for all three rows alike: plain vLLM's inductor cache (``/tmp/torchinductor_<user>``)
and the replica's node folder (``~/.cache/raylift/warmup/node``, ``serve_apps/llm/warmup_cache.py``) both outlive a
row, as do vLLM's accepted engine-args verdicts (``~/.cache/raylift/checks``: the machine's, like vLLM's own caches,
so a fresh checkout does not import vLLM again to check args this machine already checked; the new version's deploy
gets an empty one, as a new config would); what raylift stages in its store (the warm-up artifact included) starts empty in row 2. The benchmark after the smoke test is the smallest the gate allows (it is after
the figures). Ratios are against plain vLLM's ``ready_s`` / ``first_token_s`` of the same round.

    .cache/venvs/control/bin/python bench/cold_start.py [--rounds 3] [--out cold_start]

Writes ``bench/results/<out>.json``; prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.harness.local_stack import ROOT, LocalStack, make_stack, stop_cluster  # noqa: E402

RUNTIME_PY = ROOT / ".cache/venvs/runtime/bin/python"
PLAIN_PORT, PORT_BASE = 24911, 24000
MODEL_NAME = "tiny-llama"


def llm_app() -> dict[str, Any]:
    from raylift.serve.config import load_config

    return dict(load_config(ROOT / "serve_apps/configs/llm-cpu.yaml")["applications"][0])


def plain_vllm(model: Path, log: Path) -> dict[str, Any]:
    """Plain vLLM's API server: spawn -> /health (ready) -> first streamed token; its log's phases."""
    from raylift.serve.cold_start import parse_engine_log

    app = llm_app()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(app.get("runtime_env", {}).get("env_vars", {}))
    cmd = [str(RUNTIME_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", MODEL_NAME, "--host", "127.0.0.1", "--port", str(PLAIN_PORT)]
    for key, value in app["args"].get("engine_args", {}).items():
        if key != "load_format":  # plain vLLM's default loader on a local folder
            cmd += [f"--{key.replace('_', '-')}", str(value)]
    started = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{PLAIN_PORT}"
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"plain vLLM exited {proc.returncode}: {log.read_text()[-2000:]}")
            if time.monotonic() - started > 600:
                raise TimeoutError(f"plain vLLM not ready in 600 s: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        ready_s = time.monotonic() - started
        first_token_s = started_to_first_token(url, started)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    return {"ready_s": round(ready_s, 1), "first_token_s": round(first_token_s, 1),
            "phases_s": parse_engine_log(log.read_text(errors="replace"))}


def started_to_first_token(url: str, started: float) -> float:
    """Seconds from ``started`` (monotonic) to the first streamed token of one short completion."""
    body = {"model": MODEL_NAME, "prompt": "Hello", "max_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if line.startswith("data: ") and '"text"' in line:
                return time.monotonic() - started
    raise RuntimeError("the stream ended without a token")


_STOPPING = re.compile(r"^INFO (?P<at>\S+ \S+) .*Stopping Replica\(id='(?P<id>[^']+)'")
_STOPPED = re.compile(r"^INFO (?P<at>\S+ \S+) .*Replica\(id='(?P<id>[^']+)'.*\) is stopped\.")


def old_replica_stops(stack: LocalStack) -> list[float]:
    """Seconds from Serve's "Stopping Replica" to its "is stopped", per replica, in the Serve controller's own log on
    this stack's cluster (the old version's replica, stopped after the new one is up: Serve calls the app RUNNING only
    then)."""
    from raylift.config import LocalSettings
    from raylift.local.cluster import LocalRayCluster

    temp_dir = LocalRayCluster(LocalSettings(home=stack.home)).temp_dir  # keyed by the home alone
    started: dict[str, datetime] = {}
    out: list[float] = []
    for log in sorted(temp_dir.glob("session_latest/logs/serve/controller_*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if found := _STOPPING.search(line):
                started[found.group("id")] = _serve_time(found.group("at"))
            elif (found := _STOPPED.search(line)) and found.group("id") in started:
                stopped = _serve_time(found.group("at")) - started.pop(found.group("id"))
                out.append(round(stopped.total_seconds(), 1))
    return out


def _serve_time(stamp: str) -> datetime:
    """A Serve log line's own timestamp (``2026-11-28 18:10:08,894``)."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")


def _seconds_between(start: str | None, end: str | None) -> float | None:
    """ISO timestamps (the record's ``triggered_at``, a task-log line's own stamp) to seconds apart."""
    if not start or not end:
        return None
    return round((datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start)).total_seconds(), 1)


def deploy(stack: LocalStack, conf: dict[str, Any]) -> dict[str, Any]:
    """One ``airflow dags test raylift_deploy`` and its run record's cold start. ``before_deploy_s``: the trigger to the
    deploy step's start (Airflow starting the run and its first task, then the steps before ``deploy``: the cluster's
    start on a first deploy), what is left of trigger → RUNNING after the deploy step's own phases;
    ``airflow_to_first_step_s``: the trigger to the first line a raylift operator logs (Airflow creating the run and
    starting its first task: ``dags test`` builds its in-process execution API then), the part before any raylift
    code runs."""
    runs = stack.home / "model-store/_raylift/runs"
    before = set(runs.glob("*/record.json")) if runs.exists() else set()
    result = stack.dags_test("raylift_deploy", conf, timeout=1200)
    if result.returncode != 0:
        raise RuntimeError(f"raylift_deploy failed: {(result.stdout + result.stderr)[-3000:]}")
    (record_path,) = set(runs.glob("*/record.json")) - before
    cold = json.loads(record_path.read_text())["cold_start"]
    first_step = next((ln.split(" ", 1)[0] for ln in (result.stdout + result.stderr).splitlines()
                       if "[airflow.task.operators.raylift." in ln), None)
    replicas = cold.get("replicas") or [{}]
    steps = cold.get("deploy_steps_s") or {}
    to_running = cold.get("trigger_to_running_s")
    return {"trigger_to_running_s": to_running,
            "before_deploy_s": round(to_running - sum(steps.values()), 1) if to_running and steps else None,
            "airflow_to_first_step_s": _seconds_between(cold.get("triggered_at"), first_step),
            "trigger_to_first_token_s": cold.get("trigger_to_first_token_s"),
            "replica_total_s": replicas[-1].get("total_s"), "phases_s": replicas[-1].get("phases_s") or {},
            "deploy_steps_s": steps}


def make_model(folder: Path, seed: int) -> Path:
    subprocess.run([str(RUNTIME_PY), str(ROOT / "tools/make_tiny_model.py"), str(folder), "--seed", str(seed)],
                   check=True, capture_output=True, text=True, timeout=300)
    return folder


def raylift_rows(work: Path, model: Path, new_model: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A fresh home (its Airflow DB migrated before the clock), first deploy, then the new version; stack stopped."""
    home = work / f"home-{time.monotonic_ns()}"
    stack = make_stack(home, port_base=PORT_BASE)  # migrates the new home's Airflow DB (not timed)
    try:
        small = {"target": "local", "served_name": MODEL_NAME, "model_id": "bench/tiny-llama", "workers": 0,
                 "replicas": 1, "concurrency": [1], "requests_per_level": 8}
        first = deploy(stack, small | {"model_source": str(model)})
        # a new version's config is one vLLM has not checked on this machine: an empty verdict cache for it
        stack.env["RAYLIFT_CHECK_CACHE"] = str(home / "checks-new-version")
        again = deploy(stack, small | {"model_source": str(new_model), "release": "direct",
                                       "regression_baseline": "none"})
        stops = old_replica_stops(stack)
        again["old_replica_stop_s"] = stops[-1] if stops else None
        return first, again
    finally:
        stop_cluster(stack)
        shutil.rmtree(home, ignore_errors=True)


def where_it_goes(row: dict[str, Any]) -> dict[str, float] | None:
    """One raylift row's trigger -> RUNNING in parts that add up to it: ``airflow`` (before any raylift code runs),
    ``raylift_steps`` (the tasks before ``deploy`` and the deploy step's own phases up to the config write: profile,
    artifact, staging, lease, the cluster's start, the fit and engine-args checks, the write), ``replica`` (Ray's
    placement plus Serve's constructor, by the replica's own records), ``old_replica_stop`` (the old version's, in
    Serve's controller log) and ``serve_other`` (the rest of Serve's write -> RUNNING: its app build, the replica's
    scheduling, the status poll). ``floor_s``: ``airflow`` + ``replica`` + ``serve_other``, what trigger -> RUNNING
    would be if raylift's steps and the old replica's stop took no time. None when a part is missing."""
    steps = row.get("deploy_steps_s") or {}
    parts = (row.get("trigger_to_running_s"), row.get("airflow_to_first_step_s"), row.get("before_deploy_s"),
             row.get("replica_total_s"), steps.get("serve_to_running_s"))
    if any(p is None for p in parts):
        return None
    _, airflow, before, replica, serve = (float(p) for p in parts if p is not None)
    stop = float(row.get("old_replica_stop_s") or 0.0)
    own = before - airflow + sum(float(v) for k, v in steps.items() if k != "serve_to_running_s")
    other = serve - replica - stop
    return {"airflow": round(airflow, 1), "raylift_steps": round(own, 1), "replica": round(replica, 1),
            "old_replica_stop": round(stop, 1), "serve_other": round(other, 1),
            "floor_s": round(airflow + replica + other, 1)}


def median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(values), 1) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="cold_start")
    args = parser.parse_args()

    rows: dict[str, list[dict[str, Any]]] = {"plain_vllm": [], "raylift_first_deploy": [], "raylift_new_version": []}
    with tempfile.TemporaryDirectory(prefix="raylift-cold-start-") as tmp:
        work = Path(tmp)
        model = make_model(work / "models/tiny-llama", seed=0)
        for n in range(1, args.rounds + 1):
            # a new version each round (its own weights and tokenizer); its engine-args check runs (raylift_rows)
            new_model = make_model(work / f"models/tiny-llama-v{n + 1}", seed=n)
            plain = plain_vllm(model, work / f"plain-{n}.log")
            rows["plain_vllm"].append(plain)
            print(f"round {n}: plain vLLM ready {plain['ready_s']} s, first token {plain['first_token_s']} s", flush=True)
            first, again = raylift_rows(work, model, new_model)
            rows["raylift_first_deploy"].append(first)
            rows["raylift_new_version"].append(again)
            print(f"round {n}: raylift first deploy -> RUNNING {first['trigger_to_running_s']} s, first token "
                  f"{first['trigger_to_first_token_s']} s; new version -> RUNNING {again['trigger_to_running_s']} s, "
                  f"first token {again['trigger_to_first_token_s']} s", flush=True)

    plain_ready = median(rows["plain_vllm"], "ready_s")
    plain_token = median(rows["plain_vllm"], "first_token_s")
    summary: dict[str, Any] = {"plain_vllm": {"ready_s": plain_ready, "first_token_s": plain_token}}
    for name in ("raylift_first_deploy", "raylift_new_version"):
        running = median(rows[name], "trigger_to_running_s")
        token = median(rows[name], "trigger_to_first_token_s")
        steps = sorted({k for r in rows[name] for k in r.get("deploy_steps_s") or {}})
        summary[name] = {
            "deploy_steps_median_s": {k: median([r["deploy_steps_s"] for r in rows[name]
                                                 if k in (r.get("deploy_steps_s") or {})], k) for k in steps},
            "trigger_to_running_s": running, "trigger_to_first_token_s": token,
            "airflow_to_first_step_s": median(rows[name], "airflow_to_first_step_s"),
            "before_deploy_s": median(rows[name], "before_deploy_s"),
            **({"old_replica_stop_s": median(rows[name], "old_replica_stop_s")}
               if any("old_replica_stop_s" in r for r in rows[name]) else {}),
            "running_vs_plain_ready": round(running / plain_ready, 2) if running and plain_ready else None,
            "first_token_vs_plain": round(token / plain_token, 2) if token and plain_token else None,
        }
        parts = [p for p in (where_it_goes(r) for r in rows[name]) if p is not None]
        if parts:
            summary[name]["where_it_goes_median_s"] = {k: median(parts, k) for k in parts[0]}
            floor = summary[name]["where_it_goes_median_s"]["floor_s"]
            summary[name]["floor_vs_plain_ready"] = round(floor / plain_ready, 2) if floor and plain_ready else None
    goals = {"raylift_rows_within_1_3x_of_plain": all(
                 (summary[n]["first_token_vs_plain"] or 99) <= 1.3 for n in ("raylift_first_deploy", "raylift_new_version")),
             "first_deploy_under_60_s": (summary["raylift_first_deploy"]["trigger_to_running_s"] or 999) < 60}
    result = {"rounds": args.rounds, "host_cpus": os.cpu_count(), "summary": summary, "goals": goals, "runs": rows}
    out = ROOT / "bench/results" / f"{args.out}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"summary": summary, "goals": goals}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
