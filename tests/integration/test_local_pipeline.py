"""The whole raylift_deploy DAG on target=local: real Airflow, real Ray, real vLLM, the tiny model.

One module-scoped stack, three runs: a good deploy, a deliberately broken deploy (rolled back while
the previous version keeps answering), and teardown.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.local_stack import LocalStack, make_stack, stop_cluster, tiny_model_path

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = make_stack(tmp_path_factory.mktemp("rl"), port_base=21000)
    try:
        yield s
    finally:
        stop_cluster(s)


def conf(**overrides: object) -> dict:
    base = {
        "model_source": str(tiny_model_path()),
        "model_id": "test/tiny-llama",
        "served_name": "tiny-test",
        "replicas": 1,
        "workers": 1,
        "concurrency": [1, 4],
        "requests_per_level": 8,
    }
    return base | overrides


def chat(url: str, model: str = "tiny-test") -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=30,
    )


def test_deploy_dag_serves_and_benchmarks(stack: LocalStack) -> None:
    result = stack.dags_test("raylift_deploy", conf())
    assert result.returncode == 0, stack.failure_lines(result)
    record = stack.run_records()[-1]
    assert record["target"] == "local"
    assert record["steps"] == dict.fromkeys(
        ["artifact", "model", "deployed", "smoke", "benchmark", "serve_config"], "done"
    )
    assert record["smoke"]["chat"]["usage"]["completion_tokens"] > 0
    overall = record["benchmark"]["overall"]
    assert overall["output_tokens"] > 0 and overall["errors"] == 0
    assert record["model"]["files"]["model.safetensors"]["sha256"]
    assert record["serve_config_hash"] and record["artifact"]["digest"]
    # the endpoint is still serving after the run, and the cluster has the worker it asked for
    resp = chat(stack.serve_url)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]
    nodes = httpx.get(f"{stack.dashboard_url}/api/v0/nodes", params={"detail": "1"}, timeout=10).json()
    assert sum(n["state"] == "ALIVE" for n in nodes["data"]["result"]["result"]) == 2


def test_broken_deploy_rolls_back_and_previous_app_keeps_answering(stack: LocalStack) -> None:
    assert chat(stack.serve_url).status_code == 200, "needs the good deploy from the previous test"
    failures: list[str] = []
    answered = 0
    stop = threading.Event()

    def probe() -> None:  # bounded: at most one request every 0.5 s while the broken deploy runs
        nonlocal answered
        while not stop.is_set():
            try:
                r = chat(stack.serve_url)
                answered += 1
                if r.status_code != 200:
                    failures.append(f"{r.status_code} {r.text[:100]}")
            except httpx.HTTPError as exc:
                failures.append(repr(exc))
            stop.wait(0.5)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    try:
        result = stack.dags_test(
            "raylift_deploy", conf(app_args={"fail_on_start": "deliberately broken app"}, workers=1)
        )
    finally:
        stop.set()
        prober.join(30)
    out = result.stdout + result.stderr
    errors = stack.failure_lines(result)
    assert result.returncode != 0
    assert "Rolled back: restored app 'llm' from the last good config" in out, errors[-3000:]
    assert "DEPLOY_FAILED" in out, errors[-3000:]
    assert answered > 0 and failures == [], failures[:5]
    # after the rollback the previous version is RUNNING and answering
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        apps = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()["applications"]
        if apps["llm"]["status"] == "RUNNING":
            break
        time.sleep(2)
    assert apps["llm"]["status"] == "RUNNING", apps["llm"]
    assert "fail_on_start" not in str(apps["llm"]["deployed_app_config"]["args"])
    assert chat(stack.serve_url).status_code == 200


def test_teardown_dag_stops_the_cluster(stack: LocalStack) -> None:
    result = stack.dags_test("raylift_teardown", {})
    assert result.returncode == 0, result.stderr[-3000:]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{stack.dashboard_url}/api/version", timeout=3)
    assert not (Path(stack.home) / "cluster/nodes.json").read_text().strip("{} \n")
