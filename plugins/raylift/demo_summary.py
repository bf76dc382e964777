"""Print what `make demo` produced: endpoint URL, a curl that works, and the benchmark table."""

from __future__ import annotations

import argparse
import json
import sys

from raylift.config import local_settings
from raylift.deploy_state import run_key
from raylift.store import LocalStore


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--run-id", default=None, help="default: the newest run record")
    ap.add_argument("--log", default=None)
    args = ap.parse_args(argv)
    settings = local_settings()
    store = LocalStore(settings.model_store)
    if args.run_id is None:
        records = sorted(store.root.glob("_raylift/runs/*/record.json"), key=lambda p: p.stat().st_mtime)
        if not records:
            print(f"No run record found in {store.root}: see {args.log}.", file=sys.stderr)
            return 1
        args.run_id = json.loads(records[-1].read_text())["run_id"]
    record = store.read_json(f"{run_key(args.run_id)}/record.json")
    bench = store.read_json(f"{run_key(args.run_id)}/benchmark.json")
    if not record:
        print(f"No run record for {args.run_id}: the run failed early; see {args.log}.", file=sys.stderr)
        return 1
    failed = [step for step, state in (record.get("steps") or {}).items() if state != "done"]
    served = record["params"].get("served_name", "tiny-llama")
    endpoint = record.get("endpoint") or settings.serve_url
    print("\n=== raylift demo ===")
    print(f"run:       {args.run_id}")
    print(f"record:    {store.child_uri(run_key(args.run_id) + '/record.json')}")
    if failed:
        print(f"steps without a result: {', '.join(failed)} (see {args.log})")
    print(f"endpoint:  {endpoint}/v1  (OpenAI-compatible; model {served!r})")
    body = json.dumps({"model": served, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16})
    print(f"try:       curl -s {endpoint}/v1/chat/completions -H 'Content-Type: application/json' -d '{body}'")
    if bench:
        from raylift.bench.runner import format_table

        print("\nbenchmark:")
        print(format_table(bench))
    print("\nstop it:   make teardown")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
