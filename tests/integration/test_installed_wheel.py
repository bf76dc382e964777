"""raylift_deploy from the built wheel on the oldest Airflow raylift supports: a served endpoint.

The environment is tests/install's ``airflow-3.1.8`` platform: a fresh venv with Airflow 3.1.8, the Apache providers
at raylift's floors (amazon 9.25.0, cncf-kubernetes 10.16.0, ...) and the wheel built from a clean copy of this
checkout; no checkout on its path, no Ray in it. Its DAGs folder holds only what ``raylift-install-dags`` writes.
Airflow 3.1.8's own ``dags test`` runs the whole DAG on the local target (the runtime venv's Ray and vLLM, the tiny
model); then the endpoint answers a chat completion, and the run record says every step was done. The newest
Airflow (3.3.2) is the rest of the suite's control environment.

It starts one vLLM engine, so it runs in the engine lane, after or before the other engine tests, never beside them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.harness.local_stack import stack_ports, tiny_model_path
from tests.install.envs import OLDEST, build_dist, platform_env, run

pytestmark = [pytest.mark.integration, pytest.mark.system, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[2]
RUNTIME_PYTHON = ROOT / ".cache" / "venvs" / "runtime" / "bin" / "python"
PORT_BASE = 24000  # apart from the other stacks' ports and outside Ray's worker range (10002-19999)
SERVED = "tiny-wheel"

STOP = (
    "from raylift.local.cluster import LocalRayCluster; from raylift.config import local_settings; "
    "LocalRayCluster(local_settings()).stop(grace_s=5)"
)


def test_the_oldest_airflow_deploys_from_the_wheel_to_a_served_endpoint(tmp_path: Path) -> None:
    env = platform_env(OLDEST, build_dist())
    dags = tmp_path / "dags"
    dags.mkdir()
    run([env.prefix / "bin" / "raylift-install-dags", dags])
    process_env = env.env(
        tmp_path / "airflow",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="True",
        RAYLIFT_HOME=str(tmp_path / "raylift"),
        RAYLIFT_RUNTIME_PYTHON=str(RUNTIME_PYTHON),
        **stack_ports(PORT_BASE),
    )
    run([env.airflow, "db", "migrate"], env=process_env, timeout=600)
    conf = {
        "model_source": str(tiny_model_path()),
        "model_id": "test/tiny-llama",
        "served_name": SERVED,
        "replicas": 1,
        "workers": 0,
        "concurrency": [1],
        "requests_per_level": 4,
        "engine_args": {"enforce_eager": True},
    }
    try:
        done = subprocess.run([str(env.airflow), "dags", "test", "raylift_deploy", "--conf", json.dumps(conf)],
                              env=process_env, capture_output=True, text=True, timeout=1500)
        (tmp_path / "dags-test.log").write_text(done.stdout + done.stderr)
        assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
        records = sorted((tmp_path / "raylift" / "model-store" / "_raylift" / "runs").glob("*/record.json"))
        assert records, f"no run record; the run's output is in {tmp_path / 'dags-test.log'}"
        record = json.loads(records[-1].read_text())
        assert record["target"] == "local"
        assert record["steps"] == dict.fromkeys(
            ["artifact", "model", "deployed", "smoke", "benchmark", "release", "promote", "serve_config"], "done"
        )
        serve = f"http://127.0.0.1:{process_env['RAYLIFT_SERVE_PORT']}"
        models = httpx.get(f"{serve}/v1/models", timeout=30).json()
        assert SERVED in [m["id"] for m in models["data"]], models
        reply = httpx.post(f"{serve}/v1/chat/completions", timeout=120, json={
            "model": SERVED, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8})
        assert reply.status_code == 200, reply.text[:500]
        assert reply.json()["usage"]["completion_tokens"] > 0
    finally:
        subprocess.run([str(env.python), "-c", STOP], env=process_env, timeout=180, check=False)
