"""raylift_deploy onto a Ray cluster raylift did not start (target ``ray``), running the Inferentia2 write-up's
llmperf profile from Params.

A Ray head is started outside raylift, as Compose's ``ray-head`` is (``ray start --head`` from the runtime env,
on 127.0.0.1 with its own ports). Then real Airflow (``dags test``) deploys the tiny model onto it through the
``ray`` target, given only the cluster's dashboard and Serve URLs: vLLM on that cluster checks the engine args
(a Ray job), smoke and benchmark pass, and ``raylift_teardown`` leaves the cluster and its app running.

The benchmark is the Inferentia2 run of seed 004 reached from Params alone (``benchmark_profile``
``llmperf-inf2``: 3072 ± 200 tokens in, 512 ± 20 out; a served name holding '/'; warm-up; a level time limit),
with the request count scaled down from 176 at concurrency 22 to 4 at concurrency 2 for 2 CPU cores. The tiny
model's context is raised to 4608 for it (3072 + 3 sigma in, 512 + 3 sigma out) (``hf_overrides``, ``max_model_len``) and the app's output cap to 640.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from raylift.errors import RayliftValueError
from raylift.targets import get_target
from tests.harness.local_stack import LocalStack, make_stack, tiny_model_path

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RAY = ROOT / ".cache/venvs/runtime/bin/ray"
# 20xxx: below the kernel's ephemeral range (32768-60999), where any client's connection can hold a port at that
# moment (seen: 34371, this head's object-manager port when it was 34xxx, taken for all three starts while the unit
# tests ran beside this module), and above Ray's default worker ports (10002-19999) that the other clusters use
DASHBOARD, SERVE = 20265, 20800
PORTS = ["--port=20379", f"--dashboard-port={DASHBOARD}", "--ray-client-server-port=20001",
         "--node-manager-port=20370", "--object-manager-port=20371", "--dashboard-agent-listen-port=20366",
         "--dashboard-agent-grpc-port=20367", "--runtime-env-agent-port=20368", "--metrics-export-port=20369",
         "--min-worker-port=20400", "--max-worker-port=20499"]
DASHBOARD_URL, SERVE_URL = f"http://127.0.0.1:{DASHBOARD}", f"http://127.0.0.1:{SERVE}"
TARGET = {"target": "ray", "target_options": {"dashboard_url": DASHBOARD_URL, "serve_url": SERVE_URL}}
SERVED = "raylift-test/tiny-llama-inf2"  # a hub-style name, as the write-up's meta-llama/Llama-2-13b-chat-hf
REQUESTS, CONCURRENCY = 4, 2


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[subprocess.Popen[bytes]]:
    """A Ray head raylift did not start: its own process group, ports and temp dir; stopped after the module."""
    if not RAY.exists():
        pytest.skip("runtime venv missing (make setup)")
    home = tmp_path_factory.mktemp("ray-head")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    # a stand-in of a user's cluster whose stop is not under test: Ray 2.60 drains a node for 30 s on SIGTERM first
    # (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S; the stop signals its whole group, so there is nothing to drain)
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    env |= {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": "0",
            "PATH": f"{RAY.parent}:{env.get('PATH', '')}"}
    # `ray start` gives its raylet a fixed 30 s to register with the GCS and exits when it ran out, which a box
    # loaded by the other lane's tests reached once (after the dashboard had answered): start again then
    for attempt in range(1, 4):
        log = home / f"head-{attempt}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(RAY), "start", "--head", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                 "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=2",
                 f"--temp-dir=/tmp/raylift-existing-{os.getpid()}-{attempt}", *PORTS],
                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=home, start_new_session=True,
            )
        if _head_up(proc, timeout_s=180):
            break
        _stop_head(proc)
        assert attempt < 3, f"ray head did not come up 3 times: {log.read_text()[-2000:]}"
    try:
        yield proc
    finally:
        _stop_head(proc)


def _head_up(proc: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """Until Ray's state API lists the head ALIVE and `ray start` still runs past its own start-up wait (True), or
    `ray start` exits (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            nodes = httpx.get(f"{DASHBOARD_URL}/api/v0/nodes", timeout=5).json()["data"]["result"]["result"]
            if any(n["state"] == "ALIVE" for n in nodes):
                time.sleep(2)  # `ray start` returns to --block only once the node registered
                return proc.poll() is None
        except (httpx.TransportError, KeyError, ValueError):
            pass
        time.sleep(1)
    return False


def _stop_head(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL to the whole group: Ray's own processes share it, and none may outlive the module."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, ray_head: subprocess.Popen[bytes]) -> LocalStack:
    return make_stack(tmp_path_factory.mktemp("rc"), port_base=24000, warm_cli=True)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _app_status() -> str:
    apps = httpx.get(f"{DASHBOARD_URL}/api/serve/applications/", timeout=10).json()["applications"]
    return apps["llm"]["status"] if "llm" in apps else "absent"


def test_vllm_on_the_cluster_checks_engine_args(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs where vLLM runs: a Ray job on the cluster, in the app's package (not Airflow's env)."""
    monkeypatch.setenv("RAYLIFT_HOME", stack.env["RAYLIFT_HOME"])  # the package is built into the stack's home
    target = get_target("ray", **TARGET["target_options"])
    artifact = target.build_artifact()
    with pytest.raises(RayliftValueError, match="vLLM on the Ray cluster rejects engine_args .field 'max_model_lenn'"):
        target.validate_engine_args(str(tiny_model_path()), {"max_model_lenn": 512}, working_dir=artifact.working_dir)


@pytest.mark.timeout(1500)
def test_deploy_onto_it_runs_the_inferentia2_profile_from_params(stack: LocalStack) -> None:
    conf = {
        **TARGET,
        "model_source": str(tiny_model_path()),
        "model_id": "test/tiny-llama",
        "served_name": SERVED,
        "replicas": 1,
        "workers": 0,
        # no torch.compile: the profile and the cluster are what this judges, and graphs for a 4608-token context
        # are a compile of their own (tens of CPU-seconds on an empty cache) that no other test shares
        "engine_args": {"max_model_len": 4608, "hf_overrides": {"max_position_embeddings": 4608}, "enforce_eager": True},
        "app_args": {"default_max_tokens": 640},
        "benchmark_profile": "llmperf-inf2",
        "concurrency": [CONCURRENCY],
        "requests_per_level": REQUESTS,
        "max_seconds_per_level": 1800,
        "warmup_requests": 1,
    }
    result = stack.dags_test("raylift_deploy", conf, timeout=1200)
    assert result.returncode == 0, stack.failure_lines(result)
    record = stack.run_records()[-1]
    assert record["target"] == "ray"
    assert record["steps"] == dict.fromkeys(
        ["artifact", "model", "deployed", "smoke", "benchmark", "release", "promote", "serve_config"], "done"
    )
    # Ray Serve's own view: the app RUNNING on that cluster, at the Serve URL raylift was given
    assert _app_status() == "RUNNING"
    models = httpx.get(f"{SERVE_URL}/v1/models", timeout=10).json()
    assert [m["id"] for m in models["data"]] == [SERVED]

    # vLLM on that cluster checked the engine args: a Ray job there, in the app's package
    jobs = httpx.get(f"{DASHBOARD_URL}/api/jobs/", timeout=10).json()
    checks = [j for j in jobs if "llm.check_args" in j["entrypoint"] and "\"max_model_len\": 4608" in j["entrypoint"]]
    assert [j["status"] for j in checks] == ["SUCCEEDED"], [(j["entrypoint"], j["status"]) for j in jobs]
    run = max((stack.home / "model-store/_raylift/runs").glob("*/benchmark.json"), key=lambda p: p.stat().st_mtime)
    profile = json.loads(run.read_text())["profile"]
    assert (profile["name"], profile["prompt_sizing"]) == ("llmperf-inf2", "tokenizer"), profile
    # llmperf's summary, as llmperf writes it, beside raylift's results
    summary = json.loads((run.parent / "llmperf_summary.json").read_text())[str(CONCURRENCY)]
    assert summary["model"] == SERVED and summary["num_concurrent_requests"] == CONCURRENCY
    assert (summary["mean_input_tokens"], summary["stddev_input_tokens"]) == (3072, 200)
    assert (summary["mean_output_tokens"], summary["stddev_output_tokens"]) == (512, 20)
    assert summary["results_num_completed_requests"] == REQUESTS and summary["results_number_errors"] == 0, summary
    # the prompts were sized in the served tokenizer: the server counted 3072 +- 3 sigma per request
    assert 3072 - 600 <= summary["results_number_input_tokens_min"] <= summary["results_number_input_tokens_max"] <= 3072 + 600
    assert 512 - 60 <= summary["results_number_output_tokens_min"] <= summary["results_number_output_tokens_max"] <= 512 + 60
    assert "ttft_s: mean" in result.stdout + result.stderr  # llmperf's figures in the task log

    # teardown leaves a cluster raylift did not start running, with its app serving
    down = stack.dags_test("raylift_teardown", TARGET)
    assert down.returncode == 0, stack.failure_lines(down)
    assert "not started by raylift, so teardown leaves it" in down.stdout + down.stderr
    assert _answers(f"{DASHBOARD_URL}/api/version") and _app_status() == "RUNNING"
    assert httpx.get(f"{SERVE_URL}/v1/models", timeout=10).status_code == 200
