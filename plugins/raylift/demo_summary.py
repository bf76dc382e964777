"""Print what `make demo` produced: endpoint URL, a curl that works, the benchmark table and its report."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from raylift.config import REPORTS_URL_PREFIX, local_settings
from raylift.release.state import run_file, run_key
from raylift.store import LocalStore


def api_base_url() -> str:
    """The Airflow api-server's URL from Airflow's config (``[api] base_url``, else host and port)."""
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="") or ""
    if base:
        return base.rstrip("/")
    host = conf.get("api", "host", fallback="127.0.0.1")
    host = "127.0.0.1" if host in ("", "0.0.0.0") else host
    return f"http://{host}:{conf.getint('api', 'port', fallback=8080)}"


def report_location(run_folder: str) -> str | None:
    """The report's URL in the Airflow UI if an api-server with the raylift plugin answers, else None.
    Asked without credentials, the plugin's app answers 401 (it needs a logged-in Airflow user); a server
    without the plugin answers 404."""
    import httpx

    from raylift.measure.report import report_url

    url = report_url(run_folder, api_base_url())
    try:
        return url if httpx.get(url, timeout=3).status_code in (200, 401) else None
    except httpx.HTTPError:
        return None


def print_cold_start(cold: dict[str, Any]) -> None:
    """Each replica the deploy started, by phase (``raylift.serve.cold_start``), and the smoke test's first token."""
    from raylift.serve.cold_start import table_rows

    replicas = cold.get("replicas") or []
    if replicas:
        head, body = table_rows(replicas)  # one column per replica here: phases are many, replicas few
        rows = [[name, *(row[i] for row in body)] for i, name in enumerate(head)]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        print("by phase (seconds; '-': not timed by Ray, Serve, the app or vLLM; outer spans contain inner ones):")
        for row in rows:
            print("  " + row[0].ljust(widths[0]) + "".join("  " + cell.rjust(w) for cell, w in zip(row[1:], widths[1:])))
    elif cold.get("note"):
        print(f"by phase:  {cold['note']}")
    if cold.get("deploy_steps_s"):
        from raylift.serve.cold_start import deploy_steps_line

        print("deploy step: " + deploy_steps_line(cold["deploy_steps_s"]))
    if cold.get("first_token_s") is not None:
        print(f"first token: {cold['first_token_s']} s after the smoke test's streamed request was sent")


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
    record = store.read_json(run_file(args.run_id, "record"))
    bench = store.read_json(run_file(args.run_id, "benchmark"))
    if not record:
        print(f"No run record for {args.run_id}: the run failed early; see {args.log}.", file=sys.stderr)
        return 1
    failed = [step for step, state in (record.get("steps") or {}).items() if state != "done"]
    served = record.get("served_name") or record["params"].get("served_name") or "tiny-llama"
    endpoint = record.get("endpoint") or settings.serve_url
    print("\n=== raylift demo ===")
    print(f"run:       {args.run_id}")
    print(f"record:    {store.child_uri(run_file(args.run_id, 'record'))}")
    if failed:
        print(f"steps without a result: {', '.join(failed)} (see {args.log})")
    print(f"endpoint:  {endpoint}/v1  (OpenAI-compatible; model {served!r})")
    cold = record.get("cold_start") or {}
    if cold.get("trigger_to_running_s") is not None:
        print(f"cold start: trigger → RUNNING {cold['trigger_to_running_s']} s, "
              f"→ first token {cold.get('trigger_to_first_token_s')} s")
    print_cold_start(cold)
    body = json.dumps({"model": served, "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16})
    print(f"try:       curl -s {endpoint}/v1/chat/completions -H 'Content-Type: application/json' -d '{body}'")
    if bench:
        from raylift.measure.runner import format_table

        print("\nbenchmark:")
        print(format_table(bench))
    report = store.path(f"{run_key(args.run_id)}/benchmark.html")
    if report.is_file():
        where = report_location(report.parent.name)
        print(f"report:    {where or report}" + ("  (log in to Airflow to open it)" if where else ""))
        if where is None:
            print(f"           (in the Airflow UI once `airflow api-server` runs: {api_base_url()}"
                  f"{REPORTS_URL_PREFIX}/, or the benchmark task's 'Benchmark report' link)")
    print("\nstop it:   make teardown")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
