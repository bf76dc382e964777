"""How often the regression gate calls an unchanged endpoint "regressed" on this machine.

Deploys the tiny model on the real local stack (``raylift_deploy`` through ``airflow dags test``, as the
integration suite does), optionally starts the suite's background load, then benchmarks the unchanged
endpoint ``--runs`` times back to back with the deploy DAG's profile (chat, stream, ``smoke``, levels
[1, 4]). Every ordered pair of runs is judged with :func:`raylift.measure.judgement.judge` at the default
confidence and tolerance, once with runs next to each other (the same window) and once across the whole
series. Nothing changed between the runs, so every "regressed" is a false rollback.

    RAYLIFT_TINY_MODEL=.cache/tiny-llama .cache/venvs/control/bin/python bench/gate_noise.py \
        [--runs 10] [--requests 64] [--replicas 2] [--no-load] [--out gate_noise]

Writes bench/results/<out>.json (every run's samples and every pair's verdicts).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plugins"))

from tests.harness.background_load import BackgroundLoad  # noqa: E402
from tests.harness.local_stack import make_stack, stop_cluster, tiny_model_path  # noqa: E402

MODEL = "tiny-noise"


def pair_verdicts(results: list[dict[str, Any]], pairs: list[tuple[int, int]], **params: Any) -> dict[str, Any]:
    from raylift.measure.judgement import judge

    verdicts: list[dict[str, Any]] = []
    for base, new in pairs:
        j = judge(results[new], results[base], **params)
        verdicts.append({"baseline": base, "new": new, "verdict": j.verdict,
                         "regressed": [m.describe() for m in j.of("regressed")]})
    return {"pairs": len(pairs), "verdicts": dict(Counter(v["verdict"] for v in verdicts)), "detail": verdicts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--no-load", action="store_true")
    ap.add_argument("--arrival", default="constant", choices=["constant", "poisson"])
    ap.add_argument("--out", default="gate_noise")
    args = ap.parse_args()

    from raylift.config import DEFAULT_MAX_REGRESSION, DEFAULT_REGRESSION_CONFIDENCE, REGRESSION_MIN_REQUESTS
    from raylift.measure.runner import run_benchmark

    params = {"confidence": DEFAULT_REGRESSION_CONFIDENCE, "tolerance": DEFAULT_MAX_REGRESSION,
              "min_requests": REGRESSION_MIN_REQUESTS}
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="gate-noise-") as tmp:
        stack = make_stack(Path(tmp), port_base=26000)
        try:
            conf = {"model_source": str(tiny_model_path()), "model_id": "test/tiny-llama", "served_name": MODEL,
                    "replicas": args.replicas, "workers": 1, "concurrency": [1, 4], "requests_per_level": 8}
            deployed = stack.dags_test("raylift_deploy", conf)
            if deployed.returncode != 0:
                print(stack.failure_lines(deployed))
                return 1
            load = None if args.no_load else BackgroundLoad(stack.serve_url, MODEL, max_requests=5000,
                                                            max_seconds=args.runs * 120 + 300,
                                                            arrival=args.arrival)
            if load:
                load.__enter__()
                load.wait_for(10)
            try:
                for i in range(args.runs):
                    t0 = time.monotonic()
                    result = run_benchmark(stack.serve_url, MODEL, profile="smoke", concurrency=[1, 4],
                                           requests_per_level=args.requests)
                    results.append(result)
                    med = {lv["concurrency"]: lv["ttft_ms"]["p50"] for lv in result["levels"]}
                    print(f"run {i}: {time.monotonic() - t0:.1f}s TTFT p50 by level {med}", flush=True)
            finally:
                if load:
                    load.__exit__(None, None, None)
        finally:
            stop_cluster(stack)
    n = len(results)
    out = {
        "runs": n, "requests_per_level": args.requests, "replicas": args.replicas, "background_load": None if args.no_load else args.arrival,
        "params": params,
        "adjacent": pair_verdicts(results, [(i, i + 1) for i in range(n - 1)], **params),
        "all_pairs": pair_verdicts(results, [(i, j) for i in range(n) for j in range(n) if i != j], **params),
        "results": results,
    }
    path = ROOT / f"bench/results/{args.out}.json"
    path.write_text(json.dumps(out, indent=1))
    print("adjacent:", out["adjacent"]["verdicts"], "all pairs:", out["all_pairs"]["verdicts"], "->", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
