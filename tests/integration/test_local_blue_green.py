"""A runtime change released blue/green on target=local, for real (issue 44): real Airflow (`dags test`), two real
Ray clusters, real vLLM engines, raylift's front HAProxy, the tiny model.

One module stack with RAYLIFT_FRONT_PORT set, its tests in order:
1. the app is deployed on the blue cluster (raylift's own runtime), clients use the front;
2. a second runtime env (raylift's with one pin moved) is released while a bounded client streams requests through
   the front the whole time: the green cluster starts from it, the candidate is judged beside the serving app, the
   front is switched, and the blue cluster's processes are gone; no request failed; green serves, on the new runtime;
3. a deliberately slower candidate (``max_num_seqs: 1``) on the first runtime again is judged on a new cluster and
   rejected: that cluster is stopped, and the serving cluster's Serve config, read back from Serve, never changed;
   no request failed.
Two vLLM engines run at once in 2 and 3: that is what the test is about (the candidate beside the serving app).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.fixtures.runtimes import runtime_with_moved_pin
from tests.harness.background_load import BackgroundLoad
from tests.harness.local_stack import LocalStack, make_stack, stop_cluster, tiny_model_path
from tests.serve_apps.models import RUNTIME_PYTHON

pytestmark = pytest.mark.integration

PORT_BASE = 22000  # this module's ports: Serve 22010 (green 22040), dashboard 22265 (22295), front 22090
FRONT = f"http://127.0.0.1:{PORT_BASE + 90}"
DASHBOARDS = {"blue": f"http://127.0.0.1:{PORT_BASE + 265}", "green": f"http://127.0.0.1:{PORT_BASE + 295}"}
MODEL, MOVED_PIN = "tiny-test", "six==1.16.0"
RELEASE_TIMEOUT_S = 1500


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = make_stack(tmp_path_factory.mktemp("bg"), port_base=PORT_BASE, warm_cli=True,
                   extra_env={"RAYLIFT_FRONT_PORT": str(PORT_BASE + 90)})
    try:
        yield s
    finally:
        stop_cluster(s)


@pytest.fixture(scope="module")
def new_runtime(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return runtime_with_moved_pin(Path(RUNTIME_PYTHON), tmp_path_factory.mktemp("rt") / "runtime", MOVED_PIN)


def conf(**overrides: object) -> dict[str, Any]:
    base = {"model_source": str(tiny_model_path()), "model_id": "test/tiny-llama", "served_name": MODEL,
            "replicas": 1, "workers": 0, "concurrency": [1, 4], "requests_per_level": 8,
            "engine_args": {"enforce_eager": True}}
    return base | overrides


def cluster_processes(stack: LocalStack, folder: str) -> list[psutil.Process]:
    """The `ray start` processes of one of the stack's clusters (its nodes run in its folder)."""
    where = stack.home / folder
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        argv = proc.info.get("cmdline") or []
        if "start" in argv and "--block" in argv and proc.info.get("cwd") == str(where):
            found.append(proc)
    return found


def serve_app(colour: str) -> dict[str, Any]:
    """The app as Serve's own REST API reports it on the ``colour`` cluster."""
    apps = httpx.get(f"{DASHBOARDS[colour]}/api/serve/applications/", timeout=10).json()["applications"]
    return dict(apps["llm"])


def front_states(stack: LocalStack) -> dict[str, dict[str, str]]:
    from raylift.config import LocalSettings
    from raylift.targets.local import LocalTarget

    settings = LocalSettings(home=stack.home, front_port=PORT_BASE + 90, serve_port=PORT_BASE + 10)
    front = LocalTarget(settings=settings).front()
    assert front is not None
    return dict(front.server_states())


def newest(stack: LocalStack, name: str) -> dict[str, Any]:
    files = sorted((stack.home / "model-store/_raylift/runs").glob(f"*/{name}.json"), key=lambda p: p.stat().st_mtime)
    return dict(json.loads(files[-1].read_text()))


def test_the_first_deploy_serves_through_the_front(stack: LocalStack) -> None:
    result = stack.dags_test("raylift_deploy", conf(), timeout=RELEASE_TIMEOUT_S)
    assert result.returncode == 0, stack.failure_lines(result)
    answer = httpx.post(f"{FRONT}/v1/chat/completions", timeout=60,
                        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
    assert answer.status_code == 200, answer.text
    assert front_states(stack)["blue"]["status"] != "MAINT"
    assert cluster_processes(stack, "cluster") and not cluster_processes(stack, "cluster-green")


@pytest.mark.timeout(RELEASE_TIMEOUT_S + 300)
def test_a_runtime_change_is_released_blue_green_with_no_failed_request(stack: LocalStack, new_runtime: Path) -> None:
    blue = cluster_processes(stack, "cluster")
    assert blue, "the first test's blue cluster is not running"
    with BackgroundLoad(FRONT, MODEL, rate=0.5, max_requests=3000, max_seconds=RELEASE_TIMEOUT_S) as load:
        load.wait_for(5)
        # the release's mechanics are judged here, not the gate: the same app on two CPU engines that share 2 cores
        # while one of them also serves this load was judged "regressed" in one of two runs (tpot at concurrency 4
        # +53 %), so the tolerance is wide; the gate's rejection is the next test's, and its error rates are
        # bench/gate_real_aa.py's
        result = stack.dags_test("raylift_deploy", conf(target_options={"runtime_python": str(new_runtime)},
                                                        on_inconclusive="pass", max_regression=0.9,
                                                        max_cumulative_regression=0.9, warmup_requests=4),
                                 timeout=RELEASE_TIMEOUT_S)
        load.wait_for(len(load.records) + 5)  # requests after the switch, answered by green through the front
    out = result.stdout + result.stderr
    (stack.home / "blue-green-promoted.log").write_text(out)
    report = {"requests": len(load.records), "errors": len(load.errors()), "cancelled": load.cancelled}
    print("blue/green promoted:", report, newest(stack, "release").get("verdict"))
    assert result.returncode == 0, stack.failure_lines(result)
    assert "release: blue_green" in out, stack.failure_lines(result)
    assert newest(stack, "release")["action"] == "promote"
    assert newest(stack, "baseline")["levels"], "the serving app was not measured beside the candidate"
    # blue's every process is gone; green runs, every node on the new runtime
    assert not [p for p in blue if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not cluster_processes(stack, "cluster")
    green = cluster_processes(stack, "cluster-green")
    assert green and all(p.cmdline()[0] == str(new_runtime) for p in green), [p.cmdline()[:2] for p in green]
    assert serve_app("green")["status"] == "RUNNING"
    states = front_states(stack)
    assert states["green"]["status"] not in ("MAINT", "DRAIN") and states["blue"]["status"] == "MAINT", states
    assert load.cancelled == 0 and load.errors() == [], (report, load.errors()[:5])


@pytest.mark.timeout(RELEASE_TIMEOUT_S + 300)
def test_a_slower_candidate_on_a_new_cluster_is_rejected_and_the_serving_one_is_untouched(
        stack: LocalStack) -> None:
    before = serve_app("green")
    with BackgroundLoad(FRONT, MODEL, rate=0.5, max_requests=3000, max_seconds=RELEASE_TIMEOUT_S) as load:
        load.wait_for(5)
        result = stack.dags_test("raylift_deploy", conf(
            target_options={"runtime_python": str(RUNTIME_PYTHON)}, on_inconclusive="fail", concurrency=[4],
            requests_per_level=16, engine_args={"enforce_eager": True, "max_num_seqs": 1}),
            timeout=RELEASE_TIMEOUT_S)
        load.wait_for(len(load.records) + 5)
    out = result.stdout + result.stderr
    (stack.home / "blue-green-rejected.log").write_text(out)
    decision = newest(stack, "release")
    report = {"requests": len(load.records), "errors": len(load.errors()), "cancelled": load.cancelled,
              "verdict": decision.get("verdict"), "headline_change": decision.get("headline_change")}
    print("blue/green rejected:", report)
    assert result.returncode != 0 and "release: blue_green" in out, stack.failure_lines(result)
    assert decision["action"] == "roll_back", decision
    assert "stops the candidate's cluster" in out and "the candidate's blue cluster stopped" in out, \
        stack.failure_lines(result)
    assert not cluster_processes(stack, "cluster")  # the candidate's cluster is gone
    after = serve_app("green")
    assert after["deployed_app_config"] == before["deployed_app_config"], (before, after)
    assert after["last_deployed_time_s"] == before["last_deployed_time_s"]
    assert front_states(stack)["green"]["status"] not in ("MAINT", "DRAIN")
    assert load.cancelled == 0 and load.errors() == [], (report, load.errors()[:5])
