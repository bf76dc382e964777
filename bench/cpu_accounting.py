"""Where the CPU goes while a benchmark runs: CPU seconds per component, from /proc via psutil.

On a 2-core box a server's output tokens/s is bounded by the CPU it spends per token, so the CPU each
component burns per 1000 output tokens explains a throughput gap better than wall-clock guesses: the
proxy, the replica (FastAPI + vLLM's frontend), the engine, Ray's own daemons, the load generator.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field

import psutil

ENGINE_NAMES = ("VLLM::EngineCor", "VLLM::EngineCore", "VLLM::Worker")


@dataclass
class Snapshot:
    cpu_s: dict[int, float] = field(default_factory=dict)  # pid -> user + system seconds
    component: dict[int, str] = field(default_factory=dict)
    nice: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))


def classify(proc: psutil.Process, *, plain: dict[int, str], me: int) -> str:
    """A process's component name (stable across snapshots); ``plain`` maps process groups of plain
    vLLM servers to their labels."""
    name = proc.name()
    if proc.pid == me:
        return "client: load generator"
    try:
        pgid = os.getpgid(proc.pid)
    except OSError:
        pgid = -1
    if pgid in plain:
        return f"{plain[pgid]}: engine" if name.startswith(ENGINE_NAMES) else f"{plain[pgid]}: api server"
    if name.startswith(ENGINE_NAMES):
        return "serve: engine"
    if name.startswith("ray::ProxyActor"):
        return "serve: proxy"
    if name == "haproxy":  # Ray Serve's HAProxy ingress (RAYLIFT_SERVE_INGRESS=haproxy)
        return "serve: haproxy"
    if name.startswith("ray::ServeReplica"):
        return "serve: replica (FastAPI + vLLM frontend)"
    if name.startswith("ray::ServeController"):
        return "serve: controller"
    cmd = " ".join(proc.cmdline()[:3])
    if name.startswith(("ray::", "gcs_server", "raylet", "ray-dashboard")) or "/ray/" in cmd or " ray " in f" {cmd} ":
        return "ray: daemons (gcs, raylet, dashboard, agents)"
    return "other processes"


def snapshot(*, plain: dict[int, str]) -> Snapshot:
    snap, me = Snapshot(), os.getpid()
    for proc in psutil.process_iter():
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                comp = classify(proc, plain=plain, me=me)
                snap.cpu_s[proc.pid] = times.user + times.system
                snap.component[proc.pid] = comp
                snap.nice[comp].add(proc.nice())
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return snap


def cpu_by_component(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds each component used between two snapshots (processes alive at both)."""
    used: dict[str, float] = defaultdict(float)
    for pid, cpu in after.cpu_s.items():
        if pid in before.cpu_s and before.component.get(pid) == after.component[pid]:
            used[after.component[pid]] += max(0.0, cpu - before.cpu_s[pid])
    return dict(used)


def engine_threads(*, plain: dict[int, str]) -> dict[str, list[dict]]:
    """Per engine process: its thread count and OMP_NUM_THREADS (Ray sets it from num_cpus)."""
    out: dict[str, list[dict]] = defaultdict(list)
    me = os.getpid()
    for proc in psutil.process_iter():
        try:
            if not proc.name().startswith(ENGINE_NAMES):
                continue
            out[classify(proc, plain=plain, me=me)].append(
                {"name": proc.name(), "threads": proc.num_threads(),
                 "OMP_NUM_THREADS": proc.environ().get("OMP_NUM_THREADS")})
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return dict(out)
