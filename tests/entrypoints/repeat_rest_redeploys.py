"""Issue 19's field check: the README's REST-triggered deploy, repeated on an idle stack, must pass every time.

Not a pytest test (it takes ~15 min): run it by hand on a quiet box, after `make setup`::

    RAYLIFT_TINY_MODEL=$PWD/.cache/tiny-llama .cache/venvs/control/bin/python -m tests.entrypoints.repeat_rest_redeploys 10

(an absolute model path: the Airflow workers resolve a relative one from their own folder)

It starts a real Airflow (api-server, scheduler, dag-processor, triggerer) on 127.0.0.1, triggers
``raylift_deploy`` through ``/api/v2`` with the README's conf once as the baseline and then ``N`` more times
(the same model, config and artifact: only the machine's noise differs), and writes every run's state and
regression verdicts to ``var/rest_redeploys.json``. Exit status 1 when any repeat failed.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.fixtures.airflow_server import running_airflow
from tests.harness.local_stack import ROOT, tiny_model_path

PORT_BASE = 34000
RUN_TIMEOUT_S = 900
# The README's REST example conf (section "Trigger from the UI / API / schedule"), on the tiny model.
README_CONF: dict[str, Any] = {
    "target": "local", "served_name": "tiny-llama", "replicas": 1, "workers": 0,
    "concurrency": [1, 4], "requests_per_level": 16,
}


def main(repeats: int) -> int:
    conf = README_CONF | {"model_source": str(tiny_model_path())}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="rest-redeploys-") as tmp, running_airflow(
        Path(tmp), port_base=PORT_BASE
    ) as server:
        server.wait_dags(["raylift_deploy"])
        server.unpause("raylift_deploy")
        for i in range(repeats + 1):
            run_id = f"api_deploy_{i}"
            t0 = time.monotonic()
            resp = server.trigger("raylift_deploy", conf, run_id=run_id)
            if resp.status_code != 200:
                raise SystemExit(f"trigger {run_id} refused: {resp.status_code} {resp.text[:500]}")
            state = server.wait_run("raylift_deploy", run_id, timeout_s=RUN_TIMEOUT_S)["state"]
            entry: dict[str, Any] = {"run_id": run_id, "baseline": i == 0, "state": state,
                                     "seconds": round(time.monotonic() - t0, 1)}
            try:
                judgement = server.xcom("raylift_deploy", run_id, "benchmark").get("judgement") or {}
                entry["verdict"] = judgement.get("verdict")
                entry["verdicts"] = dict(Counter(m.get("verdict") for m in judgement.get("metrics", [])))
                if judgement.get("not_attributed"):  # judged slower, but the config is the baseline's own
                    entry["not_attributed"] = judgement["not_attributed"]
            except Exception as exc:  # a failed benchmark task has no XCom; the failure report says why
                entry["xcom_error"] = f"{type(exc).__name__}: {exc}"[:300]
            try:  # the run record's cold start (the first run starts the cluster and the replica)
                record_uri = server.xcom("raylift_deploy", run_id, "run_record")
                cold = json.loads(Path(record_uri.removeprefix("file://")).read_text())["cold_start"]
                entry["cold_start"] = {k: v for k, v in cold.items() if k.endswith("_s")}
            except Exception as exc:
                entry["record_error"] = f"{type(exc).__name__}: {exc}"[:300]
            if state != "success":
                entry["failure"] = server.failure_report("raylift_deploy", run_id)[-3000:]
            print(json.dumps({k: v for k, v in entry.items() if k != "failure"}), flush=True)
            runs.append(entry)
    repeats_ok = sum(r["state"] == "success" for r in runs if not r["baseline"])
    summary = {"repeats": repeats, "repeats_passed": repeats_ok, "conf": README_CONF, "runs": runs}
    out = ROOT / "var/rest_redeploys.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    print(f"{repeats_ok}/{repeats} REST-triggered repeats passed; details in {out}")
    return 0 if repeats_ok == repeats and runs[0]["state"] == "success" else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
