"""What the staged warm-up cache saves on CPU: the LLM app's engine start, cold (empty store: compiles, publishes the
artifact) against warm (a fresh replica: fetches the artifact, unpacks it, vLLM/inductor load instead of compiling).

Each run is a fresh runtime-env process on a fresh "node" (its own ``RAYLIFT_WARMUP_DIR`` and temp dir), so nothing
from an earlier run on this host helps except the artifact. It builds the app's replica the way Serve does
(``LLMServer.__init__``: warm-up cache, model location, vLLM engine; no Ray), on the tiny Llama in a local store
(``<tmp>/model-store/tiny/main/sha256-bench``), with llm-cpu.yaml's env (``VLLM_USE_AOT_COMPILE=0`` etc.).
Runs alternate cold, warm, cold, ... (a cold run first deletes the artifact), so drift hits both alike. Phases are
vLLM's own log timings (``raylift.serve.cold_start.parse_engine_log``); "new files" counts what the engine wrote into the
cache folder besides its lock files (a warm start that really loaded compiles nothing, so writes nothing).

    .cache/venvs/control/bin/python bench/warmup_cache.py [--rounds 3]

Writes bench/results/warmup_cache.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]

from raylift.serve.cold_start import parse_engine_log  # noqa: E402
from tests.harness.local_stack import tiny_model_path  # noqa: E402

RUNTIME_PYTHON = ROOT / ".cache/venvs/runtime/bin/python"
RESULTS = ROOT / "bench/results/warmup_cache.json"
ENV = {  # serve_apps/configs/llm-cpu.yaml's runtime env
    "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_LOGGING_LEVEL": "INFO",
    "VLLM_USE_AOT_COMPILE": "0",
}
ENGINE_ARGS = {"max_model_len": 1024, "dtype": "bfloat16"}

REPLICA = r"""
import asyncio, json, logging, os, sys, threading, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s %(message)s")
from llm.app import LLMArgs, LLMServer

async def main() -> None:
    args = LLMArgs(model=sys.argv[1], served_model_name="tiny", engine_args=json.loads(sys.argv[2]))
    cls = LLMServer.func_or_class
    server = cls.__new__(cls)
    started = time.monotonic()
    await server.__init__(args)
    ready = time.monotonic() - started
    workdir = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]).parent
    # inductor's lock files are re-made by every start and never packed: not cache content
    files = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*")
                   if p.is_file() and p.suffix != ".lock" and p.name != ".raylift-warmup-sha256")
    for t in threading.enumerate():
        if t.name == "warmup-cache-publish":
            t.join()
    await server._stack.aclose()
    print("RESULT " + json.dumps({"ready_s": round(ready, 2), "files_after_ready": files}), flush=True)

asyncio.run(main())
"""


def run_once(model: Path, workdir_root: Path, restored_files: int) -> dict[str, Any]:
    env = {  # a fresh node each run: its own warm-up folder (RAYLIFT_WARMUP_DIR) and temp dir
        **os.environ, **ENV, "PYTHONPATH": str(ROOT / "serve_apps"), "TMPDIR": str(workdir_root),
        "RAYLIFT_WARMUP_DIR": str(workdir_root / "warmup"),
    }
    started = time.monotonic()
    proc = subprocess.run(
        [str(RUNTIME_PYTHON), "-c", REPLICA, str(model), json.dumps(ENGINE_ARGS)],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT / "serve_apps",
    )
    wall = time.monotonic() - started
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"replica run failed (rc {proc.returncode}):\n{log[-4000:]}")
    result = json.loads(next(line for line in log.splitlines() if line.startswith("RESULT "))[7:])
    restored = [line for line in log.splitlines() if "warm-up cache" in line]
    return {
        "ready_s": result["ready_s"], "process_wall_s": round(wall, 2), "phases": parse_engine_log(log),
        "cache_files_after_ready": len(result["files_after_ready"]),
        "new_cache_files": len(result["files_after_ready"]) - restored_files,
        "warmup_cache_lines": [line.split("warm-up cache", 1)[1].strip()[:200] for line in restored],
        "vllm_compile_lines": [line[-200:] for line in log.splitlines() if "compil" in line.lower() and "vllm" in line.lower()
                               or "init engine" in line][:8],
    }


def artifact_files(store: Path) -> tuple[int, int]:
    """(bytes, files) of the key's tarball in the store, (0, 0) when there is none."""
    found = sorted((store / "warmup-cache").rglob("*.tar.gz"))
    if not found:
        return 0, 0
    with tarfile.open(found[0]) as tar:
        return found[0].stat().st_size, sum(1 for m in tar.getmembers() if m.isfile())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--results", type=Path, default=RESULTS)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="raylift-warmup-bench-") as tmp:
        store = Path(tmp) / "model-store"
        model = store / "tiny" / "main" / "sha256-bench"
        shutil.copytree(tiny_model_path(), model)
        runs: dict[str, list[dict[str, Any]]] = {"cold": [], "warm": []}
        for i in range(opts.rounds):
            for kind in ("cold", "warm"):
                if kind == "cold":
                    shutil.rmtree(store / "warmup-cache", ignore_errors=True)
                root = Path(tmp) / f"{kind}-{i}"
                root.mkdir()
                run = run_once(model, root, artifact_files(store)[1])
                run["artifact_bytes"], run["artifact_files"] = artifact_files(store)
                runs[kind].append(run)
                print(f"{kind} {i}: ready {run['ready_s']} s, phases {run['phases']}", flush=True)
    summary = {
        kind: {
            "ready_s_median": statistics.median(r["ready_s"] for r in rs),
            "engine_init_s_median": statistics.median(r["phases"].get("engine_init", float("nan")) for r in rs),
            "new_cache_files": [r["new_cache_files"] for r in rs],
        }
        for kind, rs in runs.items()
    }
    opts.results.write_text(json.dumps({
        "what": "LLM app replica start (LLMServer.__init__, no Ray) on the tiny Llama, CPU: cold = empty store, "
                "compiles into a fresh cache folder and publishes; warm = fresh folder restored from the artifact",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(), "cpus": os.cpu_count(),
        "engine_args": ENGINE_ARGS, "env": ENV, "summary": summary, "runs": runs,
    }, indent=1) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
