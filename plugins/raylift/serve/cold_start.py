"""A replica's cold start by phase, from the timings vLLM, the Run:ai streamer, the app, Serve and Ray record themselves.

Why from their own records: each of them times its own step (vLLM prints "Loading weights took 0.21 seconds",
"init engine (profile, create kv cache, warmup model) took 5.46 s"; Serve logs when it starts a replica's
initialisation and the app when its engine is ready; Ray stamps when the replica's actor came alive). raylift only
reads them: a phase nobody printed is absent, never estimated. Two spans come from two lines' own timestamps (the
same host's clock) and say so: ``replica_init`` (Serve's start line to the app's ready line) and
``imports_and_processes``, from the app's start (its "ready in" line) to vLLM's "Starting to load model" line
(vLLM's timestamps have 1 s resolution), which covers importing vLLM, its config and starting the engine-core and
worker processes: vLLM prints no duration for it, and it is most of a small model's start.

Pure but for ``DeploySteps``' clock: text and JSON in, numbers out (the dashboard reads are
``raylift.hooks.ray_replica_logs``'s).

Which lines, in vLLM 0.32 (``logger.info`` unless said; the profiles set ``VLLM_LOGGING_LEVEL: INFO`` for them):
``Initializing model took`` (``base_loader``), ``Loading weights took`` (default loader), the Run:ai streamer's
``Overall time to stream ... of all files`` (its own logger: ``RUNAI_STREAMER_LOG_TO_STDERR=1``), ``Model loading took
... GiB memory and ... seconds`` (GPU runner), ``Dynamo bytecode transform time``, ``Compiling a graph for compile range
... takes``, ``Directly load the compiled graph(s) ... from the cache, took``, ``torch.compile took ... in total``,
``torch.compile and initial profiling/warmup run together took``, ``Initial profiling/warmup run took``, ``Memory
profiling takes``, ``Graph capturing finished in``, ``init engine (profile, create kv cache, warmup model) took``;
the app's ``vLLM engine for <name> ready in <s>s`` (``serve_apps/llm/app.py``).

Nesting (what contains what, so the figures are not added up twice): ``replica_init`` (Serve: the deployment's
constructor) contains ``engine_ready`` (the app's engine build), which contains ``imports_and_processes``,
``model_load`` (or ``model_init`` + ``weights_load``) and ``engine_init``; ``engine_init`` contains the compile,
warm-up, memory-profiling and graph-capture phases. ``total`` is Ray's ``placement_and_runtime_env`` plus Serve's
``replica_init``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_S = r"(?P<s>\d+(?:\.\d+)?)"


@dataclass(frozen=True)
class LinePhase:
    """A phase one log line states the seconds of.

    :param name: the phase's key in the record (several lines may feed one phase: two weight loaders).
    :param pattern: the line's wording, with the seconds as group ``s``.
    :param label: what it covers, for the task log, the demo summary and the report.
    """

    name: str
    pattern: re.Pattern[str]
    label: str


# The deploy step's own phases before Serve has the config, then Serve's (``DeploySteps``), in the order they happen;
# an XCom's or record's JSON keeps its keys sorted, so readers order them by this.
DEPLOY_STEPS = ("read_and_fit_check_s", "app_runtime_check_s", "engine_args_check_s", "serve_write_s",
                "serve_to_running_s")


class DeploySteps:
    """The deploy step's own phases before Serve has the config, in seconds: the read and fit check, the app runtime
    check, vLLM's engine-args check (a cached verdict is ~0 s, a new one a vLLM import) and the config write. The
    deploy keeps ``submitted()`` in an XCom at the write, so the phases survive the deferral to the wait."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._t = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.steps[name] = round(now - self._t, 3)
        self._t = now

    def submitted(self, name: str) -> dict[str, float]:
        """The last phase (the config write) lapped; the phases with the wall-clock time Serve got the config."""
        self.lap(name)
        return {**self.steps, "submitted_at": time.time()}


def deploy_steps_until(kept: Mapping[str, float] | None, running_at: float) -> dict[str, float]:
    """The deploy step's phases (``DeploySteps.submitted``, as kept) and Serve's, from the config write to RUNNING at
    ``running_at`` (when the wait saw it), in the order they happen."""
    steps = dict(kept or {})
    submitted_at = steps.pop("submitted_at", None)
    if submitted_at is not None:
        steps["serve_to_running_s"] = round(running_at - float(submitted_at), 3)
    return {k: steps[k] for k in DEPLOY_STEPS if k in steps}


def deploy_steps_line(steps: Mapping[str, float]) -> str:
    """``read and fit check 1.1 s, engine args check 10.2 s, ...`` in the order the steps happen."""
    return ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {steps[k]} s" for k in DEPLOY_STEPS if k in steps)


def _phase(name: str, wording: str, label: str) -> LinePhase:
    return LinePhase(name, re.compile(wording.replace("{s}", _S)), label)


LINE_PHASES: tuple[LinePhase, ...] = (
    _phase("model_init", r"Initializing model took {s} seconds", "model built, before its weights (vLLM)"),
    _phase("weights_load", r"Loading weights took {s} seconds", "weights loaded (vLLM's loader)"),
    _phase("weights_load", r"\[RunAI Streamer\] Overall time to stream .+? of all files to \S+: {s}s",
           "weights loaded (vLLM's loader)"),
    _phase("model_load", r"Model loading took \S+ GiB memory and {s} seconds", "model built and weights loaded (vLLM)"),
    _phase("dynamo_transform", r"Dynamo bytecode transform time: {s} s", "torch.compile: Dynamo's bytecode transform"),
    _phase("graph_compile", r"Compiling a graph for compile range .+? takes {s} s", "torch.compile: graphs compiled"),
    _phase("graph_cache_load", r"Directly load the compiled graph\(s\) for compile range .+? from the cache, took {s} s",
           "torch.compile: graphs loaded from the cache"),
    _phase("torch_compile", r"torch\.compile took {s} s in total", "torch.compile in total"),
    _phase("torch_compile_and_warmup", r"torch\.compile and initial profiling/warmup run together took {s} s in total",
           "torch.compile and the first profiling/warm-up run"),
    _phase("warmup_run", r"Initial profiling/warmup run took {s} s", "first profiling/warm-up run"),
    _phase("memory_profiling", r"Memory profiling takes {s} seconds", "memory profiling (KV-cache size)"),
    _phase("cuda_graphs", r"Graph capturing finished in {s} secs", "CUDA graphs captured"),
    _phase("engine_init", r"init engine \(profile, create kv cache, warmup model\) took {s} s",
           "engine init: profile, KV cache, warm-up (compile included)"),
    _phase("engine_init_compilation",
           r"init engine \(profile, create kv cache, warmup model\) took \S+ s \(compilation: {s} s",
           "of which compilation"),
    _phase("engine_ready", r"vLLM engine for .+ ready in {s} ?s", "the app's engine build, imports included"),
)
# phases from elsewhere than one line
LABELS: dict[str, str] = {
    "placement_and_runtime_env": "Ray: placement, worker start, runtime env (replica started → actor alive)",
    "replica_init": "Serve: the deployment's constructor (Started initializing replica → the engine's ready line)",
    "imports_and_processes": "vLLM import, config, engine processes (app start → 'Starting to load model'; ±1 s)",
    **{p.name: p.label for p in LINE_PHASES},
}
# the order a table lists them in: the start's own order, outer spans first
ORDER: tuple[str, ...] = (
    "placement_and_runtime_env", "replica_init", "engine_ready", "imports_and_processes", "model_load", "model_init",
    "weights_load", "engine_init", "engine_init_compilation", "dynamo_transform", "graph_compile", "graph_cache_load",
    "torch_compile", "torch_compile_and_warmup", "warmup_run", "memory_profiling", "cuda_graphs",
)

_PROCESS = re.compile(r"\((?P<name>[^()\s]+) pid=(?P<pid>\d+)\)")  # vLLM's "(EngineCore pid=123)" prefix
# timestamps: vLLM's "INFO 11-27 01:35:00 [file.py:68]" (no year, whole seconds), Serve's "INFO 2026-11-27 01:35:07,488"
_VLLM_AT = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<at>\d\d-\d\d \d\d:\d\d:\d\d) \[")
_SERVE_AT = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")
_LOAD_START = re.compile(r"Starting to load model ")
_READY = re.compile(r"vLLM engine for .+ ready in \d")
REPLICA_STARTED = "Started initializing replica."
REPLICA_FINISHED = "Finished initializing replica."


def parse_engine_log(text: str) -> dict[str, float]:
    """The phases the lines of a replica's worker log state (its stdout and stderr: vLLM's engine-core and worker
    processes inherit them). A phase printed several times by one process (a graph per compile range) is summed; by
    several processes (tensor-parallel workers, in parallel) the longest counts. A line that is not there leaves its
    phase out."""
    per_process: dict[str, dict[str | None, float]] = {}
    for line in text.splitlines():
        for phase in LINE_PHASES:
            found = phase.pattern.search(line)
            if found is None:
                continue
            process = _PROCESS.search(line)
            pid = process.group("pid") if process else None
            by_pid = per_process.setdefault(phase.name, {})
            by_pid[pid] = by_pid.get(pid, 0.0) + float(found.group("s"))
    phases = {name: round(max(by_pid.values()), 3) for name, by_pid in per_process.items()}
    before_load = _imports_and_processes(text, phases.get("engine_ready"))
    if before_load is not None:
        phases["imports_and_processes"] = before_load
    return phases


def _imports_and_processes(text: str, ready_in: float | None) -> float | None:
    """From the app's engine-build start (its "ready in" line's time minus the seconds it states) to vLLM's first
    "Starting to load model" line, by the lines' own timestamps (the same host's clock); None without either."""
    if ready_in is None:
        return None
    ready_at: datetime | None = None
    load_at: str | None = None
    for line in text.splitlines():
        if load_at is None and _LOAD_START.search(line) and (found := _VLLM_AT.search(line)):
            load_at = found.group("at")
        if ready_at is None and _READY.search(line) and (serve := _SERVE_AT.search(line)):
            ready_at = datetime.strptime(serve.group("at"), "%Y-%m-%d %H:%M:%S,%f")
    if ready_at is None or load_at is None:
        return None
    loading = datetime.strptime(f"{ready_at.year}-{load_at}", "%Y-%m-%d %H:%M:%S")
    if loading > ready_at:  # the year turned between the two lines
        loading = loading.replace(year=ready_at.year - 1)
    seconds = ready_in - (ready_at - loading).total_seconds()
    return round(seconds, 1) if 0 <= seconds <= ready_in else None


def replica_init_seconds(serve_log: str, worker_log: str) -> dict[str, float]:
    """``replica_init``: from Serve's "Started initializing replica." (the replica's Serve log) to its "Finished
    initializing replica.", or, where that line is missing, to the app's "ready in" line (the worker's stderr, same
    host clock and format). The second is the usual case: vLLM's logging setup (``logging.config.dictConfig``) closes
    the buffering handler Serve writes that file through, so Serve's lines after it never reach the file. Absent
    without a start and an end."""
    started = finished = None
    for line in serve_log.splitlines():
        found = _SERVE_AT.search(line)
        if found is None:
            continue
        at = datetime.strptime(found.group("at"), "%Y-%m-%d %H:%M:%S,%f")
        if REPLICA_STARTED in line:
            started, finished = at, None  # a constructor tried again: the last attempt counts
        elif REPLICA_FINISHED in line and started is not None:
            finished = at
    if started is not None and finished is None:
        for line in worker_log.splitlines():
            found = _SERVE_AT.search(line)
            if found and _READY.search(line):
                at = datetime.strptime(found.group("at"), "%Y-%m-%d %H:%M:%S,%f")
                if at >= started:
                    finished = at
                    break
    if started is None or finished is None:
        return {}
    return {"replica_init": round((finished - started).total_seconds(), 3)}


def placement_seconds(replica: Mapping[str, Any], actor: Mapping[str, Any] | None) -> dict[str, float]:
    """``placement_and_runtime_env``: from when Serve's controller started the replica (``start_time_s`` in
    ``GET /api/serve/applications/``) to when Ray's GCS saw its actor alive (``startTime`` in
    ``GET /logical/actors/<id>``, epoch ms); absent when either is missing."""
    started = replica.get("start_time_s")
    alive_ms = (actor or {}).get("startTime")
    if not started or not alive_ms:
        return {}
    seconds = float(alive_ms) / 1000 - float(started)
    return {"placement_and_runtime_env": round(seconds, 3)} if seconds >= 0 else {}


def replica_cold_start(replica: Mapping[str, Any], *, actor: Mapping[str, Any] | None, worker_log: str,
                       serve_log: str, running_at: float | None = None) -> dict[str, Any]:
    """One replica's cold start: ``phases_s`` (only those someone printed or stamped), ``total_s`` (Ray's placement
    plus Serve's constructor: None without both) and ``to_running_s`` (the replica's start to when the deploy saw
    the app RUNNING, ``running_at`` epoch seconds: an upper bound, as the wait polls)."""
    phases = {**placement_seconds(replica, actor), **replica_init_seconds(serve_log, worker_log), **parse_engine_log(worker_log)}
    total = None
    if "placement_and_runtime_env" in phases and "replica_init" in phases:
        total = round(phases["placement_and_runtime_env"] + phases["replica_init"], 3)
    started = replica.get("start_time_s")
    to_running = round(running_at - float(started), 3) if running_at and started else None
    return {
        "replica_id": replica.get("replica_id"),
        "node_id": replica.get("node_id"),
        "phases_s": {name: phases[name] for name in ORDER if name in phases},
        "total_s": total,
        "to_running_s": to_running,
    }


def new_replicas(app: Mapping[str, Any], since_s: float) -> list[dict[str, Any]]:
    """The replicas of every deployment of one app in ``GET /api/serve/applications/`` that started at or after
    ``since_s`` (epoch seconds: the app's deploy), oldest first; a replica this deploy did not start is not its cold
    start."""
    out = [dict(r) for deployment in (app.get("deployments") or {}).values() for r in deployment.get("replicas") or []
           if float(r.get("start_time_s") or 0) >= since_s - 1]
    return sorted(out, key=lambda r: float(r.get("start_time_s") or 0))


def seconds_text(seconds: float | None) -> str:
    """``41.2 s``, or ``-`` for a phase not reached or not printed."""
    return "-" if seconds is None else f"{seconds:g} s"


def phases_text(phases: Mapping[str, float | None]) -> str:
    """``placement_and_runtime_env 8.1 s, engine_init 30.2 s`` (a replica's or an EKS pod's phases)."""
    return ", ".join(f"{name} {seconds_text(seconds)}" for name, seconds in phases.items())


def summary_line(replica: Mapping[str, Any]) -> str:
    """One line for a task log or the demo: ``replica abc: total 41.2 s = placement_and_runtime_env 8.1 s, ...``."""
    parts = phases_text(replica.get("phases_s") or {})
    return (f"replica {replica.get('replica_id')}: total {seconds_text(replica.get('total_s'))}"
            f"{' (' + parts + ')' if parts else ' (no phase printed: is vLLM logging at INFO?)'}")


def table_rows(replicas: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """A table of the replicas' phases: the phase names that any replica has (in ``ORDER``), then one row per
    replica (``-`` where that replica's logs did not print the phase)."""
    rows = list(replicas)
    names = [n for n in ORDER if any(n in (r.get("phases_s") or {}) for r in rows)]
    head = ["replica", "total s", *names]
    body = []
    for r in rows:
        phases = r.get("phases_s") or {}
        total = r.get("total_s")
        body.append([str(r.get("replica_id")), "-" if total is None else f"{total:g}",
                     *(f"{phases[n]:g}" if n in phases else "-" for n in names)])
    return head, body
