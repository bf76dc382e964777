"""How many streamed tokens/s the raylift load generator can read, next to guidellm, on this machine.

Both tools run as child processes against the same stub server (tests/harness/stub_server.py, zero
delays, 1000 output tokens per request, one SSE chunk per token), same concurrency and request count.
A load generator's own ceiling must sit well above the server it measures; the ratio
raylift / guidellm should be >= 1.0.

guidellm 0.8.1 pins clash with Airflow, so it gets its own venv (.cache/venvs/guidellm, created on
first run with .cache/uvtool/bin/uv). Its synthetic prompts need a tokenizer: the tiny model's in
.cache/tiny-llama (tools/make_tiny_model.py). Writes bench/results/loadgen_headroom.json.

    .cache/venvs/control/bin/python bench/loadgen_headroom.py [--concurrency 16 --requests 64]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.harness.stub_server import running_stub  # noqa: E402

GUIDELLM_VENV = ROOT / ".cache/venvs/guidellm"
GUIDELLM_VERSION = "0.8.1"
TOKENIZER = ROOT / ".cache/tiny-llama"
OUTPUT_TOKENS = 1000
PROMPT_TOKENS = 32


def ensure_guidellm() -> Path:
    exe = GUIDELLM_VENV / "bin/guidellm"
    if not exe.exists():
        uv = ROOT / ".cache/uvtool/bin/uv"
        subprocess.run([str(uv), "venv", "--python", sys.executable, str(GUIDELLM_VENV)], check=True)
        subprocess.run([str(uv), "pip", "install", "--python", str(GUIDELLM_VENV / "bin/python"),
                        f"guidellm=={GUIDELLM_VERSION}"], check=True, timeout=900)
    return exe


def timed(cmd: list[str], timeout: float) -> tuple[float, float]:
    """Run ``cmd``; return (wall seconds, CPU seconds used by it and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "plugins")})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.perf_counter() - t0, cpu


def run_raylift(url: str, concurrency: int, requests: int, workdir: Path) -> dict:
    out = workdir / "raylift.json"
    profile = json.dumps({"name": "headroom", "mean_input_tokens": PROMPT_TOKENS,
                          "mean_output_tokens": OUTPUT_TOKENS})
    wall, cpu = timed([sys.executable, "-m", "raylift.measure", "--url", url, "--model", "stub",
                       "--profile", profile, "--concurrency", str(concurrency), "--requests", str(requests),
                       "--max-seconds", "240", "--out", str(out)], timeout=300)
    level = json.loads(out.read_text())["levels"][0]
    return {"output_tokens_per_s": level["output_tokens_per_s"], "output_tokens": level["output_tokens"],
            "errors": level["errors"], "measured_duration_s": level["duration_s"],
            "process_wall_s": wall, "process_cpu_s": cpu}


def run_guidellm(url: str, concurrency: int, requests: int, workdir: Path) -> dict:
    out = workdir / "guidellm.json"
    wall, cpu = timed([str(ensure_guidellm()), "run",
                       "--backend", f"kind=openai_http,target={url},model=stub",
                       "--profile", f"kind=concurrent,streams={concurrency}",
                       "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}",
                       "--tokenizer", f"kind=huggingface_auto,model={TOKENIZER}",
                       "--constraint", f"kind=max_requests,count={requests}",
                       "--constraint", "kind=max_duration,seconds=240",
                       "--output", f"kind=json,path={out}", "--disable-progress"], timeout=600)
    bench = json.loads(out.read_text())["benchmarks"][0]
    metrics = bench["metrics"]
    ok = len(bench["requests"]["successful"])
    tokens = ok * metrics["output_token_count"]["successful"]["mean"]
    return {"output_tokens_per_s": tokens / bench["duration"],
            "output_tokens_per_s_reported_mean": metrics["output_tokens_per_second"]["successful"]["mean"],
            "output_tokens": tokens, "errors": len(bench["requests"]["errored"]),
            "measured_duration_s": bench["duration"], "process_wall_s": wall, "process_cpu_s": cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_stub() as url:
        work = Path(tmp)
        raylift = run_raylift(url, args.concurrency, args.requests, work)
        guidellm = run_guidellm(url, args.concurrency, args.requests, work)
    ratio = raylift["output_tokens_per_s"] / guidellm["output_tokens_per_s"]
    report = {
        "what": "max streamed output tokens/s against the zero-delay stub, same concurrency and requests",
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_1m_at_end": os.getloadavg()[0]},
        "concurrency": args.concurrency, "requests": args.requests, "output_tokens_per_request": OUTPUT_TOKENS,
        "raylift": raylift, "guidellm": {"version": GUIDELLM_VERSION, **guidellm},
        "ratio_raylift_over_guidellm": ratio, "goal": ">= 1.0",
    }
    path = ROOT / "bench/results/loadgen_headroom.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    print(f"raylift : {raylift['output_tokens_per_s']:>10.0f} output tok/s  ({raylift['process_cpu_s']:.1f} CPU s)")
    print(f"guidellm: {guidellm['output_tokens_per_s']:>10.0f} output tok/s  ({guidellm['process_cpu_s']:.1f} CPU s)")
    print(f"ratio   : {ratio:.2f}x (goal >= 1.0)  -> {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
