"""Canary releases on the real local stack (issue 26): five slower candidates and five of the same speed, alternating.

One local Ray cluster (head + 1 worker, 3 CPUs) serves the tiny model with one replica; a client sends one chat
request every 2 s to the serving app the whole time (bounded in count and time) and counts every failure. Then
``raylift_deploy`` runs (``airflow dags test``, the product's own path) ten times, alternating:

- **slower**: the serving config with ``engine_args.max_num_seqs: 1``, measured at concurrency 1 and 4 (one
  sequence at a time: four concurrent requests queue behind each other);
- **same speed**: a new model folder of the same shape (the tiny model generated with another seed).

Both with ``on_inconclusive: pass``, so a slower candidate is rejected only when the gate really judges it
(regressed, failed or over the cumulative limit), never because doubt fails it. For each run: the gate's action and
verdict, the headline change, whether the serving app's Serve config changed (Ray Serve's REST API), and the
client's failed requests while it ran.

    RAYLIFT_TINY_MODEL=.cache/tiny-llama .cache/venvs/control/bin/python bench/canary_release.py [--runs 5]

Then (``--full-cluster``, on by default) a model swap on a full cluster: the head alone (2 CPUs) serving 2 one-CPU
replicas, so the canary runs on one replica lent by the serving app; the client's failures while it runs.

Writes bench/results/canary_release.json. Takes about 35 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.local_stack import stop_clusters  # noqa: E402

CONTROL_BIN = ROOT / ".cache/venvs/control/bin"
RUNTIME_PYTHON = ROOT / ".cache/venvs/runtime/bin/python"
BASE = 28000
MODEL = "tiny-canary"


def stack_env(home: Path, base: int = BASE) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "RAYLIFT_HOME": str(home), "AIRFLOW_HOME": str(home / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"), "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True", "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(base + 80),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{base + 80}/execution/",
        "RAYLIFT_SERVE_PORT": str(base + 10), "RAYLIFT_DASHBOARD_PORT": str(base + 265),
        "RAYLIFT_RAY_PORT": str(base + 379), "RAYLIFT_CLIENT_PORT": str(base + 1),
        "RAYLIFT_AGENT_PORT": str(base + 500), "PATH": f"{CONTROL_BIN}:{env.get('PATH', '')}",
    })
    return env


class Client:
    """One chat request every ``period`` s to the serving app, from one thread; every answer counted."""

    def __init__(self, url: str, period: float = 2.0, max_requests: int = 3000, max_s: float = 3600) -> None:
        self.url, self.period, self.max_requests, self.max_s = url, period, max_requests, max_s
        self.sent = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        with httpx.Client(timeout=60) as http:
            while not self._stop.is_set() and self.sent < self.max_requests and time.monotonic() - t0 < self.max_s:
                self.sent += 1
                try:
                    r = http.post(f"{self.url}/v1/chat/completions", json={
                        "model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8})
                    if r.status_code != 200:
                        self.failures.append(f"{r.status_code} {r.text[:80]}")
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                self._stop.wait(self.period)

    def __enter__(self) -> Client:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)


def airflow(env: dict[str, str], *args: str, timeout: float = 1500) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CONTROL_BIN / "airflow"), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def stack_conf(model_source: Path) -> dict[str, Any]:
    """The first deploy's conf: the tiny model, 1 replica on head + 1 worker, levels 1 and 4, doubt passes."""
    return {"model_source": str(model_source), "model_id": "bench/tiny", "served_name": MODEL, "replicas": 1,
            "workers": 1, "concurrency": [1, 4], "on_inconclusive": "pass"}


def first_deploy(env: dict[str, str], home: Path, conf: dict[str, Any]) -> bool:
    """``raylift_deploy`` once (the product's first deploy); its output in ``home/first.log``."""
    first = airflow(env, "dags", "test", "raylift_deploy", "--conf", json.dumps(conf))
    (home / "first.log").write_text(first.stdout + first.stderr)
    if first.returncode != 0:
        print(first.stderr[-3000:])
    return first.returncode == 0


def stop_stack(env: dict[str, str]) -> None:
    """Stop the local clusters this script's stack started (raylift's own stop: only its process groups): both of a
    blue/green release (gate_real_aa.py's releases change the runtime env, so the other colour's cluster may be
    the one serving at the end), then raylift's front, if the stack has one: the test harness's stop."""
    stop_clusters(env, timeout_s=180)


def make_model(folder: Path, *, seed: int, layers: int = 2) -> Path:
    """The tiny model with another seed (new weights of the same shape) or more layers (a slower one)."""
    subprocess.run([str(RUNTIME_PYTHON), str(ROOT / "tools/make_tiny_model.py"), str(folder), "--seed", str(seed),
                    "--layers", str(layers)], check=True, capture_output=True, timeout=300)
    return folder


def serving_config(dashboard: str) -> dict[str, Any]:
    apps = httpx.get(f"{dashboard}/api/serve/applications/", timeout=10).json()["applications"]
    return {"llm": apps.get("llm", {}).get("deployed_app_config"), "apps": sorted(apps)}


def newest(home: Path, name: str) -> dict[str, Any]:
    files = sorted((home / "model-store/_raylift/runs").glob(f"*/{name}"), key=lambda p: p.stat().st_mtime)
    return json.loads(files[-1].read_text()) if files else {}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5, help="candidates of each kind")
    ap.add_argument("--out", default="canary_release")
    ap.add_argument("--full-cluster", action=argparse.BooleanOptionalAction, default=True,
                    help="then a model swap on a full cluster (2 replicas on the head's 2 CPUs: a lent replica)")
    args = ap.parse_args()
    tiny = Path(os.environ.get("RAYLIFT_TINY_MODEL", ROOT / ".cache/tiny-llama"))
    home = Path(tempfile.mkdtemp(prefix="raylift-canary-", dir=ROOT / "var"))
    env = stack_env(home)
    assert airflow(env, "db", "migrate", timeout=300).returncode == 0
    base = stack_conf(tiny)
    serve, dashboard = f"http://127.0.0.1:{BASE + 10}", f"http://127.0.0.1:{BASE + 265}"
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        if not first_deploy(env, home, base):
            return 1
        serving_source = str(tiny)
        with Client(serve) as client:
            time.sleep(5)
            for i in range(2 * args.runs):
                kind = "slower" if i % 2 == 0 else "same_speed"
                if kind == "slower":
                    conf = {**base, "model_source": serving_source, "engine_args": {"max_num_seqs": 1}}
                else:
                    folder = make_model(home / f"models/tiny-seed-{i}", seed=100 + i)
                    conf = {**base, "model_source": str(folder)}
                before, failed_before, started = serving_config(dashboard), len(client.failures), time.monotonic()
                done = airflow(env, "dags", "test", "raylift_deploy", "--conf", json.dumps(conf))
                (home / f"run-{i}-{kind}.log").write_text(done.stdout + done.stderr)
                after = serving_config(dashboard)
                decision = newest(home, "release.json")
                row = {"kind": kind, "rc": done.returncode, "action": decision.get("action"),
                       "verdict": decision.get("verdict"), "headline_change": decision.get("headline_change"),
                       "cumulative_change": decision.get("cumulative_change"),
                       "serving_config_changed": before["llm"] != after["llm"],
                       "canary_left": "llm-canary" in after["apps"],
                       "client_failed": len(client.failures) - failed_before, "seconds": round(time.monotonic() - started)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if kind == "same_speed" and row["action"] == "promote":
                    serving_source = conf["model_source"]
            if args.full_cluster:
                # a full cluster: the head alone (2 CPUs) and 2 one-CPU replicas, no room for a canary beside
                # them: the serving app lends one replica's capacity (the model swap the issue names)
                full = {**base, "model_source": serving_source, "workers": 0, "replicas": 2,
                        "release": "direct", "regression_baseline": "none"}
                setup = airflow(env, "dags", "test", "raylift_deploy", "--conf", json.dumps(full))
                (home / "full-setup.log").write_text(setup.stdout + setup.stderr)
                folder = make_model(home / "models/tiny-seed-full", seed=999)
                conf = {**base, "model_source": str(folder), "workers": 0, "replicas": 2}
                before, failed_before, started = serving_config(dashboard), len(client.failures), time.monotonic()
                done = airflow(env, "dags", "test", "raylift_deploy", "--conf", json.dumps(conf))
                (home / "full-swap.log").write_text(done.stdout + done.stderr)
                after = serving_config(dashboard)
                decision = newest(home, "release.json")
                out_text = done.stdout + done.stderr
                row = {"kind": "full_cluster_swap", "setup_rc": setup.returncode, "rc": done.returncode,
                       "action": decision.get("action"), "verdict": decision.get("verdict"),
                       "lent": "lends it one of its" in out_text,
                       "serving_model_after": ((after["llm"] or {}).get("args") or {}).get("model"),
                       "canary_left": "llm-canary" in after["apps"],
                       "client_failed": len(client.failures) - failed_before, "seconds": round(time.monotonic() - started)}
                rows.append(row)
                print(json.dumps(row), flush=True)
            client_total = {"sent": client.sent, "failed": len(client.failures), "failures": client.failures[:10]}
    finally:
        stop_stack(env)

    def count(kind: str, **match: Any) -> int:
        return sum(1 for r in rows if r["kind"] == kind and all(r.get(k) == v for k, v in match.items()))

    summary = {
        "slower_rejected": count("slower", action="roll_back"), "slower_runs": count("slower"),
        "slower_serving_untouched": count("slower", serving_config_changed=False),
        "same_speed_promoted": count("same_speed", action="promote"), "same_speed_runs": count("same_speed"),
        "client_failed_requests": client_total["failed"], "client_requests": client_total["sent"],
        "canary_left_behind": sum(1 for r in rows if r["canary_left"]),
        "full_cluster_swap": next((r for r in rows if r["kind"] == "full_cluster_swap"), None),
    }
    out = {"what": "canary releases on the real local stack, alternating slower (max_num_seqs 1) and same-speed "
                   "(new model folder, same shape) candidates; on_inconclusive pass",
           "date": datetime.now(UTC).isoformat(timespec="seconds"),
           "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip(),
           "seconds": round(time.monotonic() - t0), "summary": summary, "runs": rows, "client": client_total}
    (ROOT / "bench/results").mkdir(exist_ok=True)
    (ROOT / f"bench/results/{args.out}.json").write_text(json.dumps(out, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
