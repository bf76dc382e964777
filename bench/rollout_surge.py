"""Code updates under load, three ways: raylift's surge replica, Ray Serve 2.60's native ``max_surge_percent``,
and neither (Serve's default, stop-before-start). Issue 15 asks whether the native field can replace raylift's own.

One local Ray cluster (the head, 2 CPUs) runs the translator app (the tiny T5: a replica starts in seconds, so many
updates fit a run) with 1 replica, the case where stop-before-start goes dark. A thread sends one request every
``1/rate`` s (bounded in count and time). Each round applies one code update (a new ``version`` app arg, so every
replica restarts) per way, in an order that rotates every round, and records for each: requests sent and failed
while the update ran (until the app answered with the new version only, plus 2 s), the longest a request waited
(Serve's proxy holds a request while no replica serves, so darkness shows as latency before it shows as errors),
and how long the update took.

    .cache/venvs/control/bin/python bench/rollout_surge.py [--rounds 4] [--rate 8]

Writes bench/results/rollout_surge.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BASE = 27000
WAYS = ("raylift_surge", "native_max_surge_percent", "none")


class Load:
    """Requests at ``rate``/s from one thread; each answer's status and x-raylift-app-version."""

    def __init__(self, url: str, rate: float, max_requests: int = 20000, max_s: float = 1800) -> None:
        self.url, self.period, self.max_requests, self.max_s = url, 1.0 / rate, max_requests, max_s
        self.log: list[tuple[float, int, str, float]] = []  # (sent at, status, version, latency s); status 0: none
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        with httpx.Client(timeout=30) as client:
            while not self._stop.is_set() and len(self.log) < self.max_requests and time.monotonic() - t0 < self.max_s:
                sent = time.monotonic()
                try:
                    r = client.post(self.url, json="Hello ECS!")
                    self.log.append((sent, r.status_code, r.headers.get("x-raylift-app-version", ""),
                                     time.monotonic() - sent))
                except httpx.HTTPError:
                    self.log.append((sent, 0, "", time.monotonic() - sent))
                self._stop.wait(max(0.0, self.period - (time.monotonic() - sent)))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)


def update(target: Any, way: str, base: dict, app: dict, version: str) -> None:
    """Apply the translator at ``version`` one way, and return once Serve reports it RUNNING (settled)."""
    import copy

    from raylift.release.rollout import wait_for_apps, with_native_surge, with_surge
    from raylift.serve.config import merge_app

    new = copy.deepcopy(app)
    new["args"]["version"] = version
    if way == "native_max_surge_percent":  # what raylift's deploy does now (raylift.release.rollout)
        new = with_native_surge(new, 1)
    config = merge_app(target.current_serve_config(), new, defaults=base)
    writes = [config]
    if way == "raylift_surge":  # raylift's mechanism before: num_replicas + 1 until RUNNING, then the real count
        writes = [merge_app(config, with_surge(new, 1), defaults=config), config]
    for write in writes:
        target.apply_serve_config(write)
        event = wait_for_apps(target, ["translator"], 300)
        if event.get("status") != "success":
            raise RuntimeError(f"{way}: the update did not reach RUNNING: {event}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--rate", type=float, default=8.0)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="raylift-rollout-", dir=ROOT / "var"))
    os.environ.update({"RAYLIFT_HOME": str(home), "RAYLIFT_SERVE_PORT": str(BASE + 10),
                       "RAYLIFT_DASHBOARD_PORT": str(BASE + 265), "RAYLIFT_RAY_PORT": str(BASE + 379),
                       "RAYLIFT_CLIENT_PORT": str(BASE + 1), "RAYLIFT_AGENT_PORT": str(BASE + 500)})
    import subprocess

    from raylift.config import repo_root
    from raylift.release.rollout import wait_for_apps
    from raylift.serve.config import load_config, merge_app, render_app
    from raylift.targets.local import LocalTarget

    t5 = home / "tiny-t5"
    subprocess.run([str(ROOT / ".cache/venvs/runtime/bin/python"), str(ROOT / "tools/make_tiny_t5.py"), str(t5)],
                   check=True, capture_output=True, timeout=600)
    target = LocalTarget()
    results: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    try:
        artifact = target.build_artifact()
        staged = target.stage_model(source=str(t5), model_id="bench/tiny-t5", progress=lambda _: None)
        target.scale(workers=0)
        deadline = time.monotonic() + 300
        while not target.dashboard.is_up() and time.monotonic() < deadline:
            time.sleep(2)
        base = load_config(repo_root() / "serve_apps/configs/translator-cpu.yaml")
        app = render_app(base, app_name="translator", working_dir=artifact.working_dir, replicas=1,
                         args={"model": staged.uri, "served_model_name": "tiny-t5", "version": "v0"})
        target.apply_serve_config(merge_app(target.current_serve_config(), app,
                                            defaults={**base, **target.serve_cluster_options()}))
        if wait_for_apps(target, ["translator"], timeout_s=300)["status"] != "success":
            raise RuntimeError("the translator did not start")
        url = f"{target.endpoint_url()}{app.get('route_prefix', '/translate')}"
        n = 0
        with Load(url, args.rate) as load:
            time.sleep(3)
            for r in range(args.rounds):
                order = WAYS[r % 3:] + WAYS[:r % 3]
                for way in order:
                    n += 1
                    version = f"v{n}"
                    start, first = time.monotonic(), len(load.log)
                    update(target, way, base, app, version)
                    # until every answer is the new version (the old replica gone), then 2 s more
                    settled = time.monotonic() + 120
                    while not (load.log[-3:] and all(entry[2] == version for entry in load.log[-3:])):
                        if time.monotonic() > settled:
                            raise RuntimeError(f"{way}: the old version still answers 120 s after RUNNING")
                        time.sleep(0.2)
                    time.sleep(2)
                    window = load.log[first:]
                    failed = [entry[1] for entry in window if entry[1] != 200]
                    waits = sorted(entry[3] for entry in window)
                    results[way].append({"round": r, "requests": len(window), "failed": len(failed),
                                         "statuses": sorted(set(failed)), "update_s": round(time.monotonic() - start, 1),
                                         # a request held while no replica serves: the app's dark time, as clients see it
                                         "max_latency_s": round(waits[-1], 2) if waits else None,
                                         "p50_latency_s": round(waits[len(waits) // 2], 3) if waits else None})
                    print(way, results[way][-1], flush=True)
    finally:
        target.teardown()
    summary = {way: {"updates": len(rows), "requests": sum(x["requests"] for x in rows),
                     "failed": sum(x["failed"] for x in rows),
                     "median_update_s": sorted(x["update_s"] for x in rows)[len(rows) // 2] if rows else None,
                     "max_latency_s": max((x["max_latency_s"] or 0) for x in rows) if rows else None,
                     "median_of_max_latency_s": sorted(x["max_latency_s"] or 0 for x in rows)[len(rows) // 2]
                     if rows else None}
               for way, rows in results.items()}
    out = {"what": __doc__.splitlines()[0], "rate_per_s": args.rate, "rounds": args.rounds, "replicas": 1,
           "load_avg_1m": os.getloadavg()[0], "summary": summary, "updates": results}
    path = ROOT / "bench/results/rollout_surge.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
