"""The whole raylift_deploy DAG on target=local: real Airflow (`dags test`), real Ray, real vLLM, the tiny model.

One module-scoped stack (a head and 1 worker node), its tests in order:
1. a good deploy with 2 replicas: it serves, benchmarks and keeps a run record; its benchmark report
   is reached through the benchmark task's extra link, served the way the api-server serves the
   raylift plugin;
2. reliability under a bounded streaming load from raylift's own load generator (every request it
   sent is counted):
   (0) the worker node is scaled away: it is drained first, no request fails; then it comes back;
   (a) one replica's Ray worker process is SIGKILLed: the error rate stays under 1 % and Serve brings
       the app back to 2 replicas;
   (b) a slower version is released as a canary beside the serving app: the gate rejects it, the canary
       is removed, the serving app's config never changed, and the load sees no failure;
3. a deliberately broken version (a canary that never starts) is removed while the serving app answers;
4. new weights under the same model id pass as a canary and are promoted with no failed request;
5. teardown stops the cluster.
The tests share one stack because a stack (cluster, engine starts, a deploy) is minutes on 2 cores.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

from tests.fixtures.plugin_server import serve_airflow_plugins, signed_in_as
from tests.harness.background_load import BackgroundLoad
from tests.harness.local_stack import LocalStack, make_stack, stop_cluster, tiny_model_path
from tests.serve_apps.models import RUNTIME_PYTHON

pytestmark = pytest.mark.integration

APP, DEPLOYMENT, MODEL = "llm", "LLMServer", "tiny-test"
REPLICAS = 2
# An engine start is 40-100 s on this CPU; with the 2 cores shared by other jobs it took up to 461 s.
RECOVERY_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = make_stack(tmp_path_factory.mktemp("rl"), port_base=21000, warm_cli=True)
    try:
        yield s
    finally:
        stop_cluster(s)


def conf(**overrides: object) -> dict:
    """The tiny model's deploy conf (1 replica; other test packages reuse it with their overrides)."""
    base = {
        "model_source": str(tiny_model_path()),
        "model_id": "test/tiny-llama",
        "served_name": MODEL,
        "replicas": 1,
        "workers": 1,
        "concurrency": [1, 4],
        "requests_per_level": 8,
        # no torch.compile: these tests judge raylift's release path, not vLLM's graphs, and compiling took
        # 3-10 s of each of the suite's ~25 engine starts (measured alone; more beside other jobs)
        "engine_args": {"enforce_eager": True},
    }
    return base | overrides


def chat(url: str, model: str = MODEL) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=30,
    )


def _tail(result: subprocess.CompletedProcess[str], chars: int = 4000) -> str:
    out = result.stdout + result.stderr
    lines = [ln for ln in out.splitlines() if "Error" in ln or "rollback" in ln.lower() or "gate" in ln.lower()]
    return "\n".join(lines)[-chars:] or out[-chars:]


# -- helpers ----------------------------------------------------------------------------------------
def serve_details(stack: LocalStack) -> dict[str, Any]:
    apps = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()["applications"]
    return apps[APP]


def running_replicas(app: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in app["deployments"][DEPLOYMENT]["replicas"] if r["state"] == "RUNNING"]


def wait_recovered(stack: LocalStack, gone: set[str], timeout_s: float = RECOVERY_TIMEOUT_S) -> dict[str, Any]:
    """Until the app is RUNNING with the configured replicas, none of them one of ``gone`` (REST API)."""
    deadline = time.monotonic() + timeout_s
    app: dict[str, Any] = {}
    while time.monotonic() < deadline:
        app = serve_details(stack)
        replicas = running_replicas(app)
        if (app["status"] == "RUNNING" and app["deployments"][DEPLOYMENT]["status"] == "HEALTHY"
                and len(replicas) == REPLICAS and not gone & {r["replica_id"] for r in replicas}):
            return app
        time.sleep(2)
    raise AssertionError(f"Serve did not recover to {REPLICAS} replicas in {timeout_s}s: "
                         f"{json.dumps(app.get('deployments', {}).get(DEPLOYMENT, {}), default=str)[:2000]}")


def xcom(stack: LocalStack, task_id: str, key: str) -> Any:
    """An XCom of the newest raylift_deploy run, read from the stack's Airflow database."""
    db = sqlite3.connect(stack.home / "airflow/airflow.db")
    try:
        row = db.execute(
            "SELECT value FROM xcom WHERE dag_id = 'raylift_deploy' AND task_id = ? AND key = ? "
            "ORDER BY timestamp DESC LIMIT 1", (task_id, key),
        ).fetchone()
    finally:
        db.close()
    assert row is not None, f"no XCom {key!r} for task {task_id!r}"
    value = row[0]
    return json.loads(value) if isinstance(value, (str, bytes)) else value


# -- 1. the good deploy -----------------------------------------------------------------------------
def assert_cold_start_by_phase(cold: dict[str, Any], replicas: int) -> None:
    """Each replica the deploy started has vLLM's own weight-load and engine-init timings (the profile logs vLLM at
    INFO, the Run:ai streamer to stderr), and they fit in the replica's measured start (Ray's placement and runtime
    env, then Serve's constructor), which fits in its start to the app's RUNNING."""
    assert "note" not in cold, cold["note"]
    assert len(cold["replicas"]) == replicas, cold["replicas"]
    for replica in cold["replicas"]:
        phases = replica["phases_s"]
        assert {"placement_and_runtime_env", "replica_init", "weights_load", "engine_init"} <= set(phases), replica
        assert 0 < phases["weights_load"] + phases["engine_init"] <= replica["total_s"] <= replica["to_running_s"], \
            replica
    assert cold["first_token_s"] > 0, cold  # the smoke test's streamed request


def test_deploy_dag_serves_and_benchmarks(stack: LocalStack) -> None:
    result = stack.dags_test("raylift_deploy", conf(replicas=REPLICAS))
    assert result.returncode == 0, stack.failure_lines(result)
    record = stack.run_records()[-1]
    assert record["target"] == "local"
    assert record["steps"] == dict.fromkeys(
        ["artifact", "model", "deployed", "smoke", "benchmark", "release", "promote", "serve_config"], "done"
    )
    assert record["smoke"]["chat"]["usage"]["completion_tokens"] > 0
    overall = record["benchmark"]["overall"]
    assert overall["output_tokens"] > 0 and overall["errors"] == 0
    assert record["model"]["files"]["model.safetensors"]["sha256"]
    assert record["serve_config_hash"] and record["artifact"]["digest"]
    # cold start: between the trigger and the first token lies Ray Serve's own deploy time for the app
    cold = record["cold_start"]
    at = {k: datetime.fromisoformat(cold[k]) for k in ("triggered_at", "running_at", "first_token_at")}
    deployed_at = datetime.fromtimestamp(serve_details(stack)["last_deployed_time_s"], UTC)
    assert at["triggered_at"] < deployed_at <= at["running_at"] <= at["first_token_at"], (cold, deployed_at)
    assert at["first_token_at"] <= datetime.fromisoformat(record["written_at"]), cold
    assert 0 < cold["trigger_to_running_s"] <= cold["trigger_to_first_token_s"], cold
    # ... and by phase, per replica, from Ray's, Serve's and vLLM's own records (raylift.serve.cold_start)
    assert_cold_start_by_phase(cold, REPLICAS)
    # ... and the deploy step's own phases before Serve had the config, then Serve's: its write to RUNNING is
    # what Serve's own deploy time says (last_deployed_time_s to the wait's RUNNING) and holds every replica's start
    steps = cold["deploy_steps_s"]
    assert set(steps) == {"read_and_fit_check_s", "engine_args_check_s", "serve_write_s", "serve_to_running_s"}
    assert abs((at["running_at"] - deployed_at).total_seconds() - steps["serve_to_running_s"]) < 5, (steps, cold)
    assert max(r["total_s"] for r in cold["replicas"]) <= steps["serve_to_running_s"], (steps, cold["replicas"])
    assert sum(steps.values()) <= cold["trigger_to_running_s"], (steps, cold)
    out = result.stdout + result.stderr
    assert "deploy step: read and fit check " in out, "one deploy task-log line with the step's own phases"
    assert out.count("cold start of app 'llm', replica ") == REPLICAS, "one deploy task-log line per replica"
    # the endpoint is still serving after the run, and the cluster has the worker it asked for
    resp = chat(stack.serve_url)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]
    nodes = httpx.get(f"{stack.dashboard_url}/api/v0/nodes", params={"detail": "1"}, timeout=10).json()
    assert sum(n["state"] == "ALIVE" for n in nodes["data"]["result"]["result"]) == 2
    assert len(running_replicas(serve_details(stack))) == REPLICAS
    # one proxy, on the head (a worker's proxy would be drained when its node loses its last replica)
    serve = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()
    assert serve["proxy_location"] == "HeadOnly", serve["proxy_location"]


# -- 1a. the benchmark's prompts are as long as asked, in the served tokenizer's tokens --------------
TOKEN_COUNTER = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
print(json.dumps([len(tok.encode(t, add_special_tokens=False)) for t in json.load(sys.stdin)]))
"""


def test_benchmark_prompts_have_the_requested_length_in_the_served_tokenizer(stack: LocalStack) -> None:
    from raylift.measure.loadgen import LoadGenerator
    from raylift.measure.profiles import generate_requests, get_profile
    from raylift.measure.prompt_sizing import endpoint_tokenizer, size_prompts

    async def sized() -> list[Any]:
        async with LoadGenerator(stack.serve_url, MODEL) as gen:
            tokenizer = await endpoint_tokenizer(gen.post_json, MODEL)
            assert tokenizer is not None, "the LLM app serves vLLM's /tokenize and /detokenize"
            specs = generate_requests(get_profile("short"), 24) + generate_requests(get_profile("smoke"), 8)
            return await size_prompts(tokenizer, specs)

    specs = asyncio.run(sized())
    # the judge: the model's own tokenizer, loaded by transformers in the runtime env (nobody here wrote it)
    counted = subprocess.run([str(RUNTIME_PYTHON), "-c", TOKEN_COUNTER, str(tiny_model_path())],
                             input=json.dumps([s.prompt for s in specs]), capture_output=True, text=True,
                             timeout=120, check=True)
    truth = json.loads(counted.stdout)
    off = [(s.input_tokens, n, s.prompt_tokens) for s, n in zip(specs, truth) if abs(n - s.input_tokens) > 1]
    assert not off, f"(asked, tokenizer's count, raylift's count) more than 1 token off: {off}"
    assert [s.prompt_tokens for s in specs] == truth  # the count raylift records is the tokenizer's
    # the deploy's own benchmark sized its prompts the same way, and says so
    result = newest_benchmark(stack)
    assert result["profile"]["prompt_sizing"] == "tokenizer"
    for level in result["levels"]:
        assert abs(level["sized_input_tokens"] - level["requested_input_tokens"]) <= level["requests"], level


def test_a_sweep_on_the_tiny_model_stops_where_its_rule_says_and_names_its_knee(stack: LocalStack) -> None:
    from raylift.measure.runner import run_benchmark

    result = run_benchmark(stack.serve_url, MODEL, sweep={"max_concurrency": 64}, requests_per_level=16,
                           max_seconds_per_level=60)
    sweep = result["sweep"]
    by = {lv["concurrency"]: lv["output_tokens_per_s"] for lv in result["levels"]}
    print("sweep:", sweep, {c: round(t) for c, t in by.items()})
    # Where a real server's climb ends depends on the machine's load while it runs: here it stopped by the gain rule
    # at 8-16 streams, on CI (the heavy part beside it) it grew level after level to the cap (629, 688, 748, 951
    # tok/s from 16 to 128 streams). The stub's test (tests/bench/test_runner.py) pins the gain rule on a server that
    # saturates for sure; this one checks the rule against the levels as measured: it went on only while each
    # level gained at least min_gain, and stopped at the first that did not, or at the cap.
    levels, reason = sweep["levels"], sweep["stop_reason"]
    assert levels == [lv["concurrency"] for lv in result["levels"]] == [1, 2, 4, 8, 16, 32, 64][:len(levels)], sweep
    gains = [by[b] / by[a] - 1 for a, b in zip(levels, levels[1:])]
    assert all(g >= 0.05 for g in gains[:-1]), (gains, sweep)
    if reason.startswith("throughput gain"):
        assert gains[-1] < 0.05, (gains, sweep)
    else:
        assert reason == "reached max concurrency 64" and levels[-1] == 64 and gains[-1] >= 0.05, (gains, sweep)
    assert [lv["requests"] for lv in result["levels"]] == [max(16, 4 * c) for c in levels], result["levels"]
    # the knee by its definition, from the measured levels: the lowest within 5 % of the top
    knee, top = sweep["knee_concurrency"], max(by.values())
    assert by[knee] * 1.05 >= top and all(by[c] * 1.05 < top for c in levels if c < knee), (knee, by)
    assert all(lv["errors"] == 0 for lv in result["levels"])


# -- 1. the good run's benchmark report, through the extra link -------------------------------------
@pytest.fixture()
def plugin_server(stack: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    """Airflow's own plugin mounting on 127.0.0.1 at the stack's api-server port: (URL, parent app)."""
    monkeypatch.setenv("RAYLIFT_HOME", str(stack.home))  # the reports app reads the stack's model store
    with serve_airflow_plugins(int(stack.env["AIRFLOW__API__PORT"])) as served:
        yield served


def demo_summary(stack: LocalStack) -> str:
    done = subprocess.run([sys.executable, "-m", "raylift.demo_summary"], env=stack.env, capture_output=True,
                          text=True, timeout=120)
    return done.stdout + done.stderr


def test_report_of_the_good_run_is_reachable_from_the_benchmark_task(stack: LocalStack) -> None:
    link = xcom(stack, "benchmark", "_link_BenchmarkReportLink")
    assert link.startswith("/raylift-reports/runs/") and link.endswith("/benchmark.html"), link
    run_folder = link.split("/")[3]
    folder = stack.home / "model-store/_raylift/runs" / run_folder
    assert {"benchmark.html", "benchmark.csv", "benchmark-latency.png", "benchmark-throughput.png",
            "llmperf_summary.json"} <= {p.name for p in folder.iterdir()}
    # every run is costed: this machine's nodes as Ray counts them (head + worker), free unless declared
    cost = stack.run_records()[-1]["benchmark"]["cost"]
    assert cost["nodes"] == {"local": 2} and cost["usd_per_hour"] == 0.0, cost
    page = (folder / "benchmark.html").read_text()
    assert "USD per 10⁶ output tokens" in page
    assert '<table id="cold-start"' in page and "engine_init" in page  # the deploy's replicas by phase
    # without an api-server the demo names the file; it shows the cold start by phase
    summary = demo_summary(stack)
    assert f"report:    {folder / 'benchmark.html'}" in summary
    assert "by phase (seconds" in summary and "  engine_init " in summary, summary
    assert "deploy step: read and fit check " in summary and " serve to running " in summary, summary


def test_extra_link_resolves_on_the_api_server(stack: LocalStack, plugin_server: tuple[str, Any]) -> None:
    url, parent = plugin_server
    link = xcom(stack, "benchmark", "_link_BenchmarkReportLink")
    # the report needs an Airflow user (tests/entrypoints/test_rest_api.py signs in on a real api-server)
    assert httpx.get(url + link, timeout=30).status_code == 401
    with signed_in_as(parent, SimpleAuthManagerUser(username="viewer", role="viewer")):
        page = httpx.get(url + link, timeout=30)
        assert page.status_code == 200 and "TTFT p50" in page.text and MODEL in page.text
        png = httpx.get(url + link.replace("benchmark.html", "benchmark-latency.png"), timeout=30)
        assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    # with the api-server up, the demo prints the URL to open (after logging in to Airflow)
    assert f"report:    {url}{link}  (log in to Airflow to open it)" in demo_summary(stack)


# -- 2. reliability under load: the worker scaled away, a replica killed, a gate failure --------------
@pytest.mark.timeout(RECOVERY_TIMEOUT_S + 300)
def test_scaling_the_worker_away_under_load_fails_no_request(stack: LocalStack) -> None:
    """1 worker -> 0 under load: the scale step drains the worker (Ray's node drain; Serve starts each replacement
    on the head before stopping the replica) and only then stops it. Before the drain, SIGTERM to the worker's
    process group took its replica with the requests in flight. Right after the first deploy, whose 2 replicas
    Serve spread over the head and the worker; the worker comes back afterwards for the tests that need it."""
    app = wait_recovered(stack, set())
    nodes = httpx.get(f"{stack.dashboard_url}/api/v0/nodes", params={"detail": "1"}, timeout=10).json()
    worker = [n["node_id"] for n in nodes["data"]["result"]["result"] if n["state"] == "ALIVE" and not n["is_head_node"]]
    assert len(worker) == 1
    on_worker = [r["replica_id"] for r in running_replicas(app) if r["node_id"] == worker[0]]
    assert on_worker, f"Serve put neither replica on the worker: {[r['node_id'] for r in running_replicas(app)]}"
    scale = "import logging; logging.basicConfig(level=logging.INFO); " \
            "from raylift.targets import get_target; get_target('local').scale(workers={})"  # the scale step's call
    with BackgroundLoad(stack.serve_url, MODEL, max_requests=3000, max_seconds=RECOVERY_TIMEOUT_S + 120) as load:
        load.wait_for(10)
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-c", scale.format(0)], env=stack.env, capture_output=True,
                              text=True, timeout=RECOVERY_TIMEOUT_S + 60)
        scaled_s = time.monotonic() - started
        load.wait_for(len(load.records) + 5)  # and the app answers on the head alone
    report = {"requests": len(load.records), "errors": len(load.errors()), "cancelled": load.cancelled,
              "scale_down_s": round(scaled_s, 1), "moved": on_worker}
    (stack.home / "scale-down.json").write_text(json.dumps(report, indent=2))
    print("scale-down:", report)
    try:
        logged = done.stdout + done.stderr  # raylift's log lines go where Airflow's logging sends them (stdout)
        assert done.returncode == 0, logged[-3000:]
        assert "drained: no Serve replica left on it" in logged, logged[-3000:]
        assert load.cancelled == 0 and load.errors() == [], (report, load.errors()[:5])
        after = wait_recovered(stack, set(on_worker), timeout_s=60)  # Serve's own view: 2 replicas, on the head
        assert worker[0] not in {r["node_id"] for r in running_replicas(after)}
        assert wait_alive_nodes(stack, 1), "the drained worker's node is still alive in Ray's records"
    finally:  # the worker back, empty, for the surge and kill tests that follow, whatever happened
        back = subprocess.run([sys.executable, "-c", scale.format(1)], env=stack.env, capture_output=True,
                              text=True, timeout=300)
        assert back.returncode == 0, (back.stdout + back.stderr)[-3000:]
        assert wait_alive_nodes(stack, 2), "the worker did not come back in 120 s"


def wait_alive_nodes(stack: LocalStack, count: int, timeout_s: float = 120) -> bool:
    """Until Ray's state API lists ``count`` alive nodes (False after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        nodes = httpx.get(f"{stack.dashboard_url}/api/v0/nodes", params={"detail": "1"}, timeout=10).json()
        if sum(n["state"] == "ALIVE" for n in nodes["data"]["result"]["result"]) == count:
            return True
        time.sleep(2)
    return False


# -- 2a. a replica's worker process is killed under load ------------------------------------------
@pytest.mark.timeout(RECOVERY_TIMEOUT_S + 300)
def test_killing_a_replica_process_under_load(stack: LocalStack) -> None:
    app = wait_recovered(stack, set(), timeout_s=60)
    head = next(n["node_id"] for n in httpx.get(f"{stack.dashboard_url}/api/v0/nodes", params={"detail": "1"},
                                                 timeout=10).json()["data"]["result"]["result"] if n["is_head_node"])
    replicas = running_replicas(app)
    victim = next((r for r in replicas if r["node_id"] != head), replicas[0])  # prefer the worker node's
    actors = httpx.get(f"{stack.dashboard_url}/api/v0/actors", params={"detail": "1", "limit": "1000"},
                       timeout=10).json()["data"]["result"]["result"]
    actor = next(a for a in actors if a["actor_id"] == victim["actor_id"])
    assert actor["state"] == "ALIVE" and actor["pid"] == victim["pid"], actor  # the state API agrees
    children = [p.pid for p in psutil.Process(victim["pid"]).children(recursive=True)]
    before = 0

    recovered: dict[str, Any] = {}
    killed_at = recovery_s = 0.0
    load = BackgroundLoad(stack.serve_url, MODEL, max_requests=4000, max_seconds=RECOVERY_TIMEOUT_S + 120)
    try:
        with load:
            load.wait_for(20)  # a steady state first
            before = len(load.records)
            os.kill(victim["pid"], signal.SIGKILL)
            killed_at = time.monotonic()
            recovered = wait_recovered(stack, {victim["replica_id"]})
            recovery_s = time.monotonic() - killed_at
            load.wait_for(len(load.records) + 10)  # and the recovered app answers
    finally:  # the numbers, whatever happened
        errors = load.errors()
        total = len(load.records)
        report = {"requests": total, "errors": len(errors), "cancelled": load.cancelled, "before_kill": before,
                  "recovered": bool(recovered),
                  "recovery_s": round(recovery_s or (time.monotonic() - killed_at if killed_at else 0.0), 1),
                  "error_kinds": sorted({e[:160] for e in errors}),
                  "load_avg_1m": os.getloadavg()[0]}
        (stack.home / "kill-replica.json").write_text(json.dumps(report, indent=2))
        print("kill-replica:", report)
    assert load.cancelled == 0
    assert len(errors) / total < 0.01, report
    assert len(running_replicas(recovered)) == REPLICAS
    # the killed replica's engine process went with it (nothing orphaned)
    time.sleep(5)
    orphans = [pid for pid in children if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    for pid in orphans:  # stop what the kill left behind before failing, so nothing keeps running
        os.kill(pid, signal.SIGKILL)
    assert not orphans, f"processes of the killed replica still running: {orphans}"


# -- 2b. a version that fails its gate is rolled back under load ------------------------------------
def newest_benchmark(stack: LocalStack) -> dict[str, Any]:
    """The newest run's benchmark.json (results, per-request samples and the regression judgement)."""
    files = sorted((stack.home / "model-store/_raylift/runs").glob("*/benchmark.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(files[-1].read_text())


# the candidate is far slower (seen: +167 % e2e), which 32 requests per level decide with room to spare; the gate's
# error rates at the default 128 are bench/gate_error_rates.py's (32, not 64 as before, for the suite's time)
SLOW_REQUESTS = 32


@pytest.fixture(scope="module")
def heavier_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slower version: the tiny model 4x as wide and 4x as deep (7x the time per token in transformers
    here). An engine setting that only limits batching (max_num_seqs 1) was no slower on 2 saturated cores:
    +44 % TTFT [+6 %, +82 %] and inconclusive here, inconclusive on every metric in CI. More compute per
    token is slower on any machine."""
    path = tmp_path_factory.mktemp("model-wide") / "tiny-wide"
    subprocess.run([str(RUNTIME_PYTHON), str(Path(__file__).resolve().parents[2] / "tools/make_tiny_model.py"),
                    str(path), "--hidden-size", "512", "--layers", "8"], check=True, capture_output=True, timeout=300)
    return path


def newest_release(stack: LocalStack) -> dict[str, Any]:
    """The newest run's release decision (release.json: the gate's verdict, reasons, drift since the anchor)."""
    files = sorted((stack.home / "model-store/_raylift/runs").glob("*/release.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(files[-1].read_text())


@pytest.mark.timeout(2 * RECOVERY_TIMEOUT_S + 900)
def test_a_slower_candidate_is_rejected_as_a_canary_and_no_user_request_meets_it(
    stack: LocalStack, heavier_model: Path
) -> None:
    """A canary release (issue 26): the slower version runs beside the serving app, both are measured in the same
    rounds, the gate rejects it, and the canary goes: the serving app's config is never touched and the load
    (the users) sees no failed request and never reaches the candidate."""
    before = wait_recovered(stack, set())
    with BackgroundLoad(stack.serve_url, MODEL, rate=0.5, max_requests=3000, max_seconds=1500) as load:
        load.wait_for(5)
        # heavier weights staged under the same model id and served name (eager, as every engine here)
        result = stack.dags_test("raylift_deploy", conf(replicas=REPLICAS, requests_per_level=SLOW_REQUESTS,
                                                        model_source=str(heavier_model), on_inconclusive="fail"))
        (stack.home / "canary-rejected.log").write_text(result.stdout + result.stderr)
        after = wait_recovered(stack, set())
        load.wait_for(len(load.records) + 5)
    out = result.stdout + result.stderr
    decision = newest_release(stack)
    print("slower canary:", decision["action"], decision["verdict"], decision.get("headline_change"))
    assert result.returncode != 0, _tail(result)
    assert decision["action"] == "roll_back", decision
    assert "Release gate failed" in out and "removed the canary app 'llm-canary'" in out, _tail(result)
    # the serving app was never changed: the same config object Serve deployed before the release
    assert after["deployed_app_config"] == before["deployed_app_config"]
    apps = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()["applications"]
    assert "llm-canary" not in apps, sorted(apps)
    baseline = json.loads(sorted((stack.home / "model-store/_raylift/runs").glob("*/baseline.json"),
                                 key=lambda p: p.stat().st_mtime)[-1].read_text())
    assert baseline["levels"] and baseline["levels"][0]["samples"]  # the serving app was measured beside it
    # where Ray's scheduler put the two arms, read back from Serve's status before they were measured
    placement = newest_benchmark(stack)["placement"]
    assert placement["candidate"]["app"] == "llm-canary" and placement["candidate"]["nodes"], placement
    assert placement["baseline"]["app"] in ("llm", "llm-baseline") and placement["baseline"]["nodes"], placement
    assert all(len(n) == 56 for arm in ("candidate", "baseline") for n in placement[arm]["nodes"]), placement
    assert decision["evidence"]["placement_favours"] == placement["favoured"], decision["evidence"]
    report = {"requests": len(load.records), "errors": len(load.errors()), "cancelled": load.cancelled,
              "verdict": decision["verdict"], "headline_change": decision.get("headline_change")}
    (stack.home / "canary-rejected.json").write_text(json.dumps(report, indent=2))
    print("canary-rejected:", report)
    assert load.cancelled == 0 and load.errors() == [], (report, load.errors()[:5])


# -- 3. a broken deploy, 4. teardown ----------------------------------------------------------------
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
            "raylift_deploy", conf(app_args={"fail_on_start": "deliberately broken app"}, replicas=REPLICAS)
        )
    finally:
        stop.set()
        prober.join(30)
    out = result.stdout + result.stderr
    errors = stack.failure_lines(result)
    assert result.returncode != 0
    # released as a canary (the config changed): it failed to start beside the serving app, which was never
    # touched; the rollback step removed the canary
    assert "removed the canary app 'llm-canary'" in out, errors[-3000:]
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


# -- 5. new weights under the same model_id are what the endpoint serves ----------------------------
VOCAB_PROMPT = "throughput autoscale rollback"  # few tokens with A's 2048-entry vocabulary, many with B's 320


def prompt_tokens_of(*model_dirs: Path) -> list[int]:
    """The chat prompt's token count by each model's own tokenizer (the runtime env's transformers, one process)."""
    script = (
        "import sys; from transformers import AutoTokenizer\n"
        "for d in sys.argv[2:]:\n"
        "    t = AutoTokenizer.from_pretrained(d)\n"
        "    text = t.apply_chat_template([{'role': 'user', 'content': sys.argv[1]}], add_generation_prompt=True, "
        "tokenize=False)\n"
        "    print(len(t(text, add_special_tokens=False)['input_ids']))"
    )
    runtime = Path(__file__).resolve().parents[2] / ".cache/venvs/runtime/bin/python"
    done = subprocess.run([str(runtime), "-c", script, VOCAB_PROMPT, *map(str, model_dirs)], capture_output=True,
                          text=True, timeout=300, check=True)
    return [int(line) for line in done.stdout.strip().splitlines()[-len(model_dirs):]]


def vocab_probe(url: str) -> tuple[int, str]:
    resp = httpx.post(f"{url}/v1/chat/completions", timeout=60, json={
        "model": MODEL, "messages": [{"role": "user", "content": VOCAB_PROMPT}], "max_tokens": 8,
        "temperature": 0, "seed": 7})
    assert resp.status_code == 200, resp.text[:500]
    body = resp.json()
    return body["usage"]["prompt_tokens"], body["choices"][0]["message"]["content"]


@pytest.mark.timeout(2 * RECOVERY_TIMEOUT_S + 900)
def test_new_weights_under_the_same_model_id_are_served_without_a_failed_request(
    stack: LocalStack, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    model_b = tmp_path_factory.mktemp("model-b") / "tiny-b"
    runtime = Path(__file__).resolve().parents[2] / ".cache/venvs/runtime/bin/python"
    subprocess.run([str(runtime), str(Path(__file__).resolve().parents[2] / "tools/make_tiny_model.py"), str(model_b),
                    "--seed", "1", "--vocab-size", "320"], check=True, capture_output=True, timeout=300)
    tokens_a, tokens_b = prompt_tokens_of(tiny_model_path(), model_b)
    assert tokens_a != tokens_b, (tokens_a, tokens_b)
    wait_recovered(stack, set())
    assert vocab_probe(stack.serve_url)[0] == tokens_a  # model A answers
    # 0.5 request/s, as the gate test: a canary release starts two engines (the canary's, then the promotion's)
    # beside the serving ones, and at 2/s with the suite's light part alongside, the deploy's engine-arg check
    # (vLLM's own, in the runtime env) took over its 300 s
    with BackgroundLoad(stack.serve_url, MODEL, rate=0.5, max_requests=3000, max_seconds=1200) as load:
        load.wait_for(5)
        # the same model_id (and revision), other weights: a canary beside the serving app, promoted
        # start-before-stop on the capacity the canary gives back. This test is about the promotion (no failed
        # request, B served after it), so the gate only stops a broken candidate: B's 320-token vocabulary makes
        # other work of the same prompts (seen: TPOT at concurrency 4 +415 % [+72 %, +595 %], e2e +2.7 %), which a
        # real release gate may well reject; here 8 requests per level at 99.9 % confidence leave it undecided,
        # and an undecided release promotes. One level, concurrency 1: at 4 the longer prefill queues (seen in a
        # make test beside the multi-worker stack: TTFT at concurrency 4 +299 % [+196 %, +476 %], regressed)
        result = stack.dags_test("raylift_deploy", conf(model_source=str(model_b), requests_per_level=8, concurrency=[1],
                                                        max_regression=0.99, regression_confidence=0.999,
                                                        max_cumulative_regression=10, on_inconclusive="pass"))
        load.wait_for(len(load.records) + 5)
    assert result.returncode == 0, stack.failure_lines(result)
    report = {"requests": len(load.records), "errors": len(load.errors()), "cancelled": load.cancelled}
    (stack.home / "model-swap.json").write_text(json.dumps(report, indent=2))
    print("model-swap:", report)
    assert load.cancelled == 0 and load.errors() == [], (report, load.errors()[:5])
    assert vocab_probe(stack.serve_url)[0] == tokens_b  # model B answers, by its vocabulary
    record = stack.run_records()[-1]
    sha_b = hashlib.sha256((model_b / "model.safetensors").read_bytes()).hexdigest()
    assert record["model"]["files"]["model.safetensors"]["sha256"] == sha_b
    served = serve_details(stack)["deployed_app_config"]["args"]["model"]
    assert served == record["model"]["uri"] and served.endswith(f"sha256-{record['model']['digest'][:16]}"), served
    good = json.loads((stack.home / "model-store/_raylift/local/llm/last_good.json").read_text())
    assert good["run_id"] == record["run_id"] and good["model"] == served
    assert "promoted: app 'llm' serves run" in result.stdout + result.stderr
    apps = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()["applications"]
    assert "llm-canary" not in apps, sorted(apps)


def test_teardown_dag_stops_the_cluster(stack: LocalStack) -> None:
    result = stack.dags_test("raylift_teardown", {})
    assert result.returncode == 0, result.stderr[-3000:]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{stack.dashboard_url}/api/version", timeout=3)
    assert not (Path(stack.home) / "cluster/nodes.json").read_text().strip("{} \n")
