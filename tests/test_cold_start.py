"""A replica's cold start by phase (raylift.serve.cold_start), read from one real engine start's records.

tests/fixtures/cold_start/ holds what the Ray dashboard returned for one replica of the LLM app (llm-cpu.yaml as
committed: vLLM at INFO, load_format runai_streamer, the tiny model) started on this machine: see its README.
The wording test reads vLLM's own source in the runtime environment, so a vLLM whose lines change fails it.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import pytest

from raylift.serve.cold_start import (
    LINE_PHASES,
    new_replicas,
    parse_engine_log,
    replica_cold_start,
    replica_init_seconds,
    summary_line,
)

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests/fixtures/cold_start"


def fixture_text(name: str) -> str:
    return (FIXTURE / name).read_text()


def worker_log() -> str:
    return fixture_text("worker.out") + "\n" + fixture_text("worker.err")


def recorded_replica() -> dict[str, Any]:
    app = json.loads(fixture_text("serve_app.json"))
    return dict(app["deployments"]["LLMServer"]["replicas"][0])


def recorded_cold_start() -> dict[str, Any]:
    return replica_cold_start(recorded_replica(), actor=json.loads(fixture_text("logical_actor.json")),
                              worker_log=worker_log(), serve_log=fixture_text("serve_replica.log"),
                              running_at=1795743478.0)


def test_a_real_engine_start_by_phase() -> None:
    cold = recorded_cold_start()
    assert cold["replica_id"] == "kwg6xu5b"
    assert cold["phases_s"] == {
        "placement_and_runtime_env": 1.621,  # Serve's start_time_s 1795743436.339 → the GCS's startTime ...437960 ms
        "replica_init": 38.723,  # "Started initializing replica." 01:37:18,053 → the app's ready line 01:37:56,776
        "engine_ready": 38.7,  # "vLLM engine for tiny-llama ready in 38.7s"
        "imports_and_processes": 29.9,  # 38.7 s before 01:37:56,776 → "Starting to load model" at 01:37:48
        "model_init": 0.17,  # "Initializing model took 0.169683 seconds"
        "weights_load": 0.01,  # "[RunAI Streamer] Overall time to stream 1.7 MiB of all files to cpu: 0.01s"
        "engine_init": 6.23,  # "init engine (profile, create kv cache, warmup model) took 6.23 s"
    }  # the CPU engine printed no compile, memory-profiling or graph-capture timing: none is made up
    assert cold["total_s"] == pytest.approx(1.621 + 38.723)
    assert cold["to_running_s"] == pytest.approx(1795743478.0 - 1795743436.3391964, abs=1e-3)
    phases = cold["phases_s"]
    # outer spans contain the inner ones
    assert phases["model_init"] + phases["weights_load"] + phases["engine_init"] <= phases["engine_ready"]
    assert phases["imports_and_processes"] + phases["engine_init"] <= phases["engine_ready"] <= phases["replica_init"]
    assert "replica kwg6xu5b: total 40.344 s (placement_and_runtime_env 1.621 s," in summary_line(cold)


def test_a_changed_wording_leaves_its_phase_out_instead_of_guessing() -> None:
    changed = worker_log().replace("init engine (profile, create kv cache, warmup model) took",
                                   "engine initialised (profile, kv cache, warm-up) in")
    phases = parse_engine_log(changed)
    assert "engine_init" not in phases
    assert phases["weights_load"] == 0.01 and phases["model_init"] == 0.17


def test_nothing_printed_means_no_phase() -> None:
    """vLLM at WARNING (the profiles before this change): only the app's line and the Run:ai streamer's remain."""
    at_warning = "\n".join(line for line in worker_log().splitlines() if ") INFO " not in line)
    assert set(parse_engine_log(at_warning)) == {"engine_ready", "weights_load"}
    assert parse_engine_log("") == {}
    assert replica_init_seconds("", worker_log()) == {}  # no Serve start line: no constructor span


def test_each_tensor_parallel_worker_loads_at_once_so_the_longest_counts() -> None:
    real = [line for line in worker_log().splitlines() if "Initializing model took" in line][0]
    other = real.replace("pid=27237", "pid=27238").replace("0.169683", "0.5")
    assert parse_engine_log(f"{real}\n{other}")["model_init"] == 0.5
    ranges = "(Worker pid=1) INFO 11-27 01:00:00 [backends.py:399] Compiling a graph for compile range (1, {}) takes {} s"
    assert parse_engine_log("\n".join([ranges.format(8, "1.25"), ranges.format(2048, "2.5")]))["graph_compile"] == 3.75


def test_only_replicas_this_deploy_started_count() -> None:
    app = json.loads(fixture_text("serve_app.json"))
    old = {**recorded_replica(), "replica_id": "older", "start_time_s": app["last_deployed_time_s"] - 600}
    app["deployments"]["LLMServer"]["replicas"].append(old)
    assert [r["replica_id"] for r in new_replicas(app, app["last_deployed_time_s"])] == ["kwg6xu5b"]


# -- every line the parser reads, as the installed vLLM (and the app, and the Run:ai streamer) words it -------------
RUNTIME_SITE = next((ROOT / ".cache/venvs/runtime/lib").glob("python3*/site-packages"), None)
WORDINGS = {  # phase: the files that print it (site-packages-relative, or the repo's for the app)
    "model_init": ["vllm/model_executor/model_loader/base_loader.py"],
    "weights_load": ["vllm/model_executor/model_loader/default_loader.py",
                     "runai_model_streamer/safetensors_streamer/safetensors_streamer.py"],
    "model_load": ["vllm/v1/worker/gpu_model_runner.py"],
    "dynamo_transform": ["vllm/compilation/backends.py"],
    "graph_compile": ["vllm/compilation/backends.py"],
    "graph_cache_load": ["vllm/compilation/backends.py"],
    "torch_compile": ["vllm/compilation/monitor.py"],
    "torch_compile_and_warmup": ["vllm/compilation/decorators.py"],
    "warmup_run": ["vllm/compilation/monitor.py"],
    "memory_profiling": ["vllm/utils/mem_utils.py"],
    "cuda_graphs": ["vllm/v1/worker/gpu_model_runner.py"],
    "engine_init": ["vllm/v1/engine/core.py"],
    "engine_init_compilation": ["vllm/v1/engine/core.py"],
    "engine_ready": ["repo:serve_apps/llm/app.py"],
}


def rendered_strings(path: Path) -> list[str]:
    """Every string literal and f-string of a source file, %-placeholders and f-string fields filled with 1.25
    (``%s``: ``x``), as a log line would print them."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(re.sub(r"%s", "x", re.sub(r"%[-\d.]*[dfg]", "1.25", node.value)))
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(v.value if isinstance(v, ast.Constant) else "1.25" for v in node.values))
    return out


@pytest.mark.skipif(RUNTIME_SITE is None, reason="no runtime environment (tools/setup.sh runtime)")
@pytest.mark.parametrize("phase", sorted(WORDINGS))
def test_the_installed_vllm_still_prints_each_line_so(phase: str) -> None:
    assert RUNTIME_SITE is not None
    patterns = [p.pattern for p in LINE_PHASES if p.name == phase]
    texts = [s for f in WORDINGS[phase]
             for s in rendered_strings(ROOT / f[5:] if f.startswith("repo:") else RUNTIME_SITE / f)]
    hits = [s for s in texts if any(pattern.search(s) for pattern in patterns)]
    assert hits, f"no line of {WORDINGS[phase]} matches {phase}'s {[p.pattern for p in patterns]}"
    assert all(float(next(m for m in (p.search(s) for p in patterns) if m).group("s")) in (1.25, 1.0)
               for s in hits)  # the seconds are the figure vLLM prints (1.25), not another number of the line
