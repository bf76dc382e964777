"""``python -m raylift.measure --url http://127.0.0.1:8000 --model m --profile smoke --concurrency 1,4``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from raylift.measure.profiles import PROFILES
from raylift.measure.runner import format_table, run_benchmark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raylift.measure", description="Benchmark an OpenAI-compatible endpoint.")
    parser.add_argument("--url", required=True, help="endpoint root, e.g. http://127.0.0.1:8000")
    parser.add_argument("--model", required=True, help="model name the server expects")
    parser.add_argument("--profile", default="smoke", help=f"one of {sorted(PROFILES)} or a JSON object")
    parser.add_argument("--concurrency", default="1,4", help="comma-separated levels, e.g. 1,4,16")
    parser.add_argument("--requests", type=int, default=16, help="requests per level")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="time bound per level")
    parser.add_argument("--api", choices=("chat", "completions"), default="chat")
    parser.add_argument("--no-stream", action="store_true")
    parser.add_argument("--allow-remote", action="store_true", help="allow a non-loopback endpoint")
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    args = parser.parse_args(argv)
    profile = json.loads(args.profile) if args.profile.lstrip().startswith("{") else args.profile
    result = run_benchmark(
        args.url, args.model, profile=profile,
        concurrency=[int(c) for c in args.concurrency.split(",") if c.strip()],
        requests_per_level=args.requests, max_seconds_per_level=args.max_seconds,
        api=args.api, stream=not args.no_stream, allow_remote=args.allow_remote,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    print(format_table(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
