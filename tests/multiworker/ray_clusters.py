"""Two Ray clusters on 127.0.0.1, each a head started from the runtime venv on ports of its own: ``dev`` and
``prod``, as two raylift_cluster connections name them. Started and stopped by the tests (their own process
groups only)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.harness.local_stack import ROOT

RAY = ROOT / ".cache/venvs/runtime/bin/ray"
BASES = {"dev": 30000, "prod": 31000}  # base + offsets below: nothing else here uses 30xxx/31xxx, and they lie below
# the kernel's ephemeral range (32768-60999), where the vLLM workers of the heavy tests bind their own ports


# `ray start` port flags -> offset from the cluster's base (workers: min..max)
PORT_OFFSETS = {"port": 379, "dashboard-port": 265, "ray-client-server-port": 1, "node-manager-port": 370,
                "object-manager-port": 371, "dashboard-agent-listen-port": 366, "dashboard-agent-grpc-port": 367,
                "runtime-env-agent-port": 368, "metrics-export-port": 369, "min-worker-port": 400,
                "max-worker-port": 499}


def head_ports(base: int) -> set[int]:
    """Every port a head started here binds: its named ports and its worker-port range."""
    named = {base + offset for flag, offset in PORT_OFFSETS.items() if not flag.endswith("worker-port")}
    return named | set(range(base + PORT_OFFSETS["min-worker-port"], base + PORT_OFFSETS["max-worker-port"] + 1))


@dataclass
class RayHead:
    name: str
    base: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.base + 265}"

    @property
    def serve_url(self) -> str:
        return f"http://127.0.0.1:{self.base + 800}"

    def serve_apps(self) -> dict:
        return httpx.get(f"{self.dashboard_url}/api/serve/applications/", timeout=20).json()

    def connection(self, store: Path) -> str:
        """The cluster as an Airflow connection (``AIRFLOW_CONN_<NAME>``, Airflow's JSON form)."""
        return json.dumps({"conn_type": "raylift_cluster", "extra": {
            "kind": "ray", "dashboard_url": self.dashboard_url, "serve_url": self.serve_url,
            "model_store": str(store), "redeploy": True,
        }})


def _start(name: str, base: int, home: Path) -> RayHead:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    # a stand-in of a user's cluster whose stop is not under test: Ray 2.60 drains a node for 30 s on SIGTERM first
    # (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S; the stop signals its whole group, so there is nothing to drain)
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    env |= {"RAY_USAGE_STATS_ENABLED": "0", "PATH": f"{RAY.parent}:{env.get('PATH', '')}"}
    home.mkdir(parents=True, exist_ok=True)
    log = home / "head.log"
    ports = [f"--{flag}={base + offset}" for flag, offset in PORT_OFFSETS.items()]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(RAY), "start", "--head", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
             "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=2",
             f"--temp-dir=/tmp/raylift-mw-{name}-{os.getpid()}", *ports],
            stdout=out, stderr=subprocess.STDOUT, env=env, cwd=home, start_new_session=True,
        )
    return RayHead(name, base, proc, log)


def _wait_up(head: RayHead, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{head.dashboard_url}/api/version", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if head.proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"ray head {head.name} did not come up: {head.log.read_text()[-2000:]}")
        time.sleep(1)


def _start_serve(head: RayHead, timeout_s: float = 300) -> None:
    """Start Serve on the cluster with its HTTP options, as whoever runs a cluster raylift did not start has done
    (its first start is the slowest step of a cold cluster: a controller and a proxy)."""
    config = {"http_options": {"host": "127.0.0.1", "port": head.base + 800}, "applications": []}
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            resp = httpx.put(f"{head.dashboard_url}/api/serve/applications/", json=config, timeout=120)
            if resp.status_code == 200:
                return
            error = f"HTTP {resp.status_code}: {resp.text[-500:]}"
        except httpx.TransportError as exc:
            error = repr(exc)
        if time.monotonic() > deadline:
            raise AssertionError(f"Serve did not start on ray head {head.name}: {error}")
        time.sleep(2)


def _stop(head: RayHead) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(head.proc.pid, sig)  # its own session: Ray's processes and the Serve replicas in it
        except ProcessLookupError:
            return
        try:
            head.proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def ray_clusters(home: Path) -> Iterator[dict[str, RayHead]]:
    if not RAY.exists():
        raise AssertionError("runtime venv missing (make setup)")
    with ExitStack() as cleanup:
        heads = {}
        for name, base in BASES.items():
            heads[name] = _start(name, base, home / name)
            cleanup.callback(_stop, heads[name])
        for head in heads.values():
            _wait_up(head)
        for head in heads.values():
            _start_serve(head)
        yield heads
