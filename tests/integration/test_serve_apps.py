"""Every serve app through the real raylift_deploy DAG on target=local, on ONE local stack.

The translator and the llama.cpp app are deployed side by side on one Ray cluster (translator on "/",
llama.cpp on "/llamacpp"), each answering its smoke test; a GPU profile is refused by the deploy step
before anything is applied; and a new translator version is rolled out under a bounded load with zero
failed requests. Then the vLLM LLM app ("/llm") is checked for serving fidelity: one list of requests
(tests/serve_apps/openai_conformance.py) goes first to plain vLLM's own OpenAI server on the same tiny
model (started, recorded and stopped before the app deploys: one engine at a time on this box), then to
the app, and each answer must have the same effect; real clients (the official openai SDK, vLLM's own
`bench serve` with both OpenAI backends, llmperf's choices[0] loop) and the seeds' request shapes get
0 failed requests; the replica runs its model in one vLLM engine process. (The LLM app's
deploy/rollback/reliability pipeline is test_local_pipeline's.)
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from bench.harness.local_stack import ROOT, LocalStack, make_stack, stop_cluster, tiny_model_path
from tests.integration.conftest import PlainVllm
from tests.serve_apps import openai_conformance as oc
from tests.serve_apps.models import RUNTIME_PYTHON, tiny_gguf_dir, tiny_t5_path

pytestmark = pytest.mark.integration

PORT_BASE = 27000
SEED_AUTOSCALING = {  # the KubeRay seed's Serve autoscaling settings
    "target_ongoing_requests": 2,
    "max_ongoing_requests": 5,
    "min_replicas": 0,
    "max_replicas": 5,
    "downscale_delay_s": 600,
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    tiny_t5_path(), tiny_gguf_dir()  # generated (and cached) before the clock of any DAG run starts
    s = make_stack(tmp_path_factory.mktemp("apps"), port_base=PORT_BASE)
    try:
        yield s
    finally:
        stop_cluster(s)


def translator_conf(**overrides: object) -> dict:
    base = {
        "serve_config": "translator-cpu.yaml",
        "app_name": "translator",
        "model_source": str(tiny_t5_path()),
        "model_id": "test/tiny-t5",
        "served_name": "tiny-t5",
        "replicas": 2,
        "workers": 0,
        "app_args": {"version": "v1"},
    }
    return base | overrides


def deployed_app(stack: LocalStack, name: str) -> dict:
    apps = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()["applications"]
    return apps[name]


def running_replicas(stack: LocalStack, app: str, deployment: str) -> int:
    replicas = deployed_app(stack, app)["deployments"][deployment]["replicas"]
    return sum(r["state"] == "RUNNING" for r in replicas)


def run_ok(stack: LocalStack, conf: dict) -> dict:
    result = stack.dags_test("raylift_deploy", conf, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return stack.run_records()[-1]


def test_translator_answers_the_seed_client(stack: LocalStack) -> None:
    record = run_ok(stack, translator_conf())
    assert record["smoke"]["kind"] == "translator" and record["smoke"]["translation"]["text"].strip()
    assert record["steps"]["benchmark"] == "done" and record["benchmark"]["overall"] is None  # no token stream
    # exactly the seed's test_translator.py: requests.post("http://127.0.0.1:8000/", json=text).text
    resp = httpx.post(f"{stack.serve_url}/", json="Hello ECS!", timeout=30)
    assert resp.status_code == 200 and resp.text.strip()
    assert resp.headers["x-raylift-app-version"] == "v1"
    assert deployed_app(stack, "translator")["deployments"]["Translator"]["status"] == "HEALTHY"
    assert running_replicas(stack, "translator", "Translator") == 2


def test_llamacpp_beside_it_with_the_seeds_autoscaling(stack: LocalStack) -> None:
    record = run_ok(
        stack,
        {
            "serve_config": "llamacpp-cpu.yaml",
            "app_name": "llamacpp",
            "route_prefix": "/llamacpp",
            "model_source": str(tiny_gguf_dir()),
            "model_id": "test/tiny-gguf",
            "served_name": "tiny-gguf",
            "workers": 0,
            "autoscaling": SEED_AUTOSCALING,
            "concurrency": [1, 2],
            "requests_per_level": 4,
        },
    )
    base = f"{stack.serve_url}/llamacpp"
    assert record["endpoint"] == base
    smoke = record["smoke"]
    assert smoke["models"] == ["tiny-gguf"] and smoke["chat"]["usage"]["completion_tokens"] > 0
    assert smoke["stream"]["chunks"] > 0 and smoke["stream"]["usage"]["completion_tokens"] > 0
    overall = record["benchmark"]["overall"]
    assert overall["errors"] == 0 and overall["output_tokens"] > 0
    config = deployed_app(stack, "llamacpp")["deployed_app_config"]["deployments"][0]
    assert config["autoscaling_config"] == {
        k: v for k, v in SEED_AUTOSCALING.items() if k != "max_ongoing_requests"
    }
    assert config["max_ongoing_requests"] == 5 and "num_replicas" not in config
    # both apps answer side by side
    chat = httpx.post(
        f"{base}/v1/chat/completions",
        json={"model": "tiny-gguf", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=30,
    ).json()
    # llama_cpp's own count: it may run up to 3 tokens past max_tokens to complete a UTF-8 character
    # (its "multibyte fix"), which the tiny byte-level model hits; llama-cpp's own server answers the same
    assert 1 <= chat["usage"]["completion_tokens"] <= 4 + 3 and chat["choices"][0]["finish_reason"] in ("length", "stop")
    assert httpx.post(f"{stack.serve_url}/", json="Hello", timeout=30).status_code == 200


def test_a_gpu_profile_is_refused_before_anything_is_applied(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deploy operator, against this cluster (3 CPUs, no GPU): TP 4 cannot fit; Serve is untouched."""
    from raylift.errors import ServeFitError
    from raylift.operators.deploy import ServeDeployOperator

    for key in ("RAYLIFT_HOME", "RAYLIFT_DASHBOARD_PORT", "RAYLIFT_SERVE_PORT", "RAYLIFT_RAY_PORT"):
        monkeypatch.setenv(key, stack.env[key])
    before = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()
    op = ServeDeployOperator(
        task_id="deploy",
        artifact={"digest": "x", "working_dir": "file:///x.zip"},
        model={"model_id": "m", "revision": "r", "uri": "/m", "manifest_uri": "/m/x"},
        served_name="llama",
        app_name="llm-tp4",
        serve_config="llm-gpu-tp4.yaml",
        route_prefix="/tp4",
    )
    with pytest.raises(ServeFitError) as err:
        op.execute({"run_id": "refused", "ti": None})
    assert "GPU: needs 4 = 1 x 4 (LLMServer); cluster has 0" in str(err.value)
    assert "Nothing was deployed" in str(err.value)
    after = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()
    assert sorted(after["applications"]) == sorted(before["applications"]) == ["llamacpp", "translator"]
    assert {n: a["last_deployed_time_s"] for n, a in after["applications"].items()} == {
        n: a["last_deployed_time_s"] for n, a in before["applications"].items()
    }


class BoundedLoad:
    """``rate`` translation requests per second from one thread, at most ``max_requests`` or ``max_s``."""

    def __init__(
        self, url: str, *, rate: float = 4.0, max_requests: int = 1200, max_s: float = 300.0
    ) -> None:
        self.url, self.period, self.max_requests, self.max_s = url, 1.0 / rate, max_requests, max_s
        self.log: list[tuple[float, int, str, str]] = []  # (t, status, version, error)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        with httpx.Client(timeout=30) as client:
            while (
                not self._stop.is_set()
                and len(self.log) < self.max_requests
                and time.monotonic() - t0 < self.max_s
            ):
                sent = time.monotonic()
                try:
                    r = client.post(self.url, json="Hello ECS!")
                    ok = r.status_code == 200 and bool(r.text.strip())
                    self.log.append(
                        (
                            sent - t0,
                            r.status_code,
                            r.headers.get("x-raylift-app-version", ""),
                            "" if ok else r.text[:200],
                        )
                    )
                except httpx.HTTPError as exc:
                    self.log.append((sent - t0, 0, "", repr(exc)))
                self._stop.wait(max(0.0, self.period - (time.monotonic() - sent)))

    def __enter__(self) -> BoundedLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    @property
    def failures(self) -> list[tuple[float, int, str, str]]:
        return [entry for entry in self.log if entry[3]]


def test_rolling_update_under_load_has_zero_failed_requests(stack: LocalStack) -> None:
    """A new translator version (changed args: every replica restarts) while ~4 requests/s run.

    The deploy step applies it start-before-stop (raylift.rollout: Serve's max_surge_percent for one
    surge replica, so a new replica runs before an old one stops) while Serve's proxy routes only to
    live ones. Why the translator: a replica starts in seconds here, so replacing 2 replicas fits a
    test, while a vLLM replica on this CPU takes 60-100 s to start; the mechanism is the same for both.
    """
    before = deployed_app(stack, "translator")
    with BoundedLoad(f"{stack.serve_url}/") as load:
        time.sleep(2)  # some traffic on v1 first
        started = time.monotonic()
        result = stack.dags_test("raylift_deploy", translator_conf(app_args={"version": "v2"}), timeout=600)
        deploy_s = time.monotonic() - started
        time.sleep(2)  # and some after the switch
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    log = load.log
    versions = [v for _, status, v, err in log if not err]
    first_v2 = next(i for i, v in enumerate(versions) if v == "v2")
    summary = {
        "requests": len(log),
        "failed": len(load.failures),
        "deploy_s": round(deploy_s, 1),
        "v1_answers": versions.count("v1"),
        "v2_answers": versions.count("v2"),
        "v1_after_first_v2": versions[first_v2:].count("v1"),
        "duration_s": round(log[-1][0], 1) if log else 0.0,
    }
    (stack.home / "rolling_update.json").write_text(json.dumps(summary, indent=1))
    print("rolling update:", json.dumps(summary))
    assert load.failures == [], load.failures[:5]
    assert summary["v1_answers"] > 0 and summary["v2_answers"] > 0, summary
    assert versions[-5:] == ["v2"] * 5, summary  # the new version serves afterwards
    after = deployed_app(stack, "translator")
    assert after["deployed_app_config"]["args"]["version"] == "v2"
    assert after["last_deployed_time_s"] > before["last_deployed_time_s"]
    assert running_replicas(stack, "translator", "Translator") == 2


# -- the vLLM LLM app: the same answers as plain vLLM, and real clients ----------------------------


@pytest.fixture(scope="module")
def plain_vllm_answers(stack: LocalStack, plain_vllm: PlainVllm) -> dict:
    """Plain vLLM's answers to the conformance list (tests/integration/conftest.py: recorded once, server stopped)."""
    return plain_vllm.answers


@pytest.fixture(scope="module")
def llm_endpoint(stack: LocalStack, plain_vllm_answers: dict) -> str:
    """The LLM app deployed by raylift_deploy on /llm (after plain vLLM stopped), with vLLM frontend
    options passed through app_args (a tool parser) and engine_args (structured-output settings)."""
    started = time.monotonic()
    record = run_ok(
        stack,
        {
            "serve_config": "llm-cpu.yaml",
            "app_name": "llm",
            "route_prefix": "/llm",
            "model_source": str(tiny_model_path()),
            "model_id": "test/tiny-llama",
            "served_name": oc.MODEL,
            # the head's 2 CPUs hold the translator (2 x 0.5) and llama.cpp's autoscaled replicas
            # (kept for its 600 s downscale delay): the vLLM replica (1 CPU) gets a worker node
            "workers": 1,
            "replicas": 1,
            "engine_args": oc.ENGINE_ARGS,
            "app_args": {"frontend_args": oc.FRONTEND_ARGS},
            "concurrency": [1, 2],
            "requests_per_level": 4,
        },
    )
    print(f"LLM app deployed (DAG run incl. smoke + benchmark) in {time.monotonic() - started:.1f}s")
    assert record["smoke"]["kind"] == "llm" and record["smoke"]["models"] == [oc.MODEL]
    assert record["benchmark"]["overall"]["errors"] == 0  # raylift's loadgen: include_usage, min_tokens, ignore_eos
    return record["endpoint"]


def test_llm_app_answers_every_request_as_plain_vllm_does(
    stack: LocalStack, plain_vllm_answers: dict, llm_endpoint: str
) -> None:
    assert llm_endpoint.endswith("/llm")
    ours = oc.record(llm_endpoint)
    differ = {
        name: {"plain_vllm": plain_vllm_answers[name], "raylift": ours[name]}
        for name in plain_vllm_answers
        if plain_vllm_answers[name] != ours[name]
    }
    problems = [p for name in ours for p in oc.check_effect(name, plain_vllm_answers[name]) + oc.check_effect(name, ours[name])]
    summary = {"requests": len(ours), "same_effect": sorted(set(ours) - set(differ)), "differ": differ, "problems": problems}
    (stack.home / "conformance.json").write_text(json.dumps(summary, indent=1))
    print("conformance:", json.dumps({"requests": len(ours), "same": len(summary["same_effect"]), "differ": sorted(differ)}))
    assert len(oc.REQUESTS) >= 25 and set(ours) == set(plain_vllm_answers)
    assert not differ, json.dumps(differ, indent=1)[:6000]
    assert not problems, problems


def test_the_llm_replica_runs_its_model_in_one_engine_process(stack: LocalStack, llm_endpoint: str) -> None:
    """llm-cpu.yaml keeps the model in vLLM's engine-core process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``). Without it,
    vLLM on CPU adds a worker process (``VLLM::Worker``) that imports torch and vLLM once more and spins on a
    shared-memory queue between steps. Judged by Serve's own replica list (the pid) and the OS's process table."""
    listed = deployed_app(stack, "llm")["deployments"]["LLMServer"]["replicas"]
    replicas = [r for r in listed if r["state"] == "RUNNING"]
    assert len(replicas) == 1, replicas
    names = sorted(p.name() for p in psutil.Process(replicas[0]["pid"]).children(recursive=True))
    engine = [n for n in names if n.startswith("VLLM::")]  # vLLM's process titles (comm keeps 15 characters)
    assert len(engine) == 1 and engine[0].startswith("VLLM::EngineCor"), names


def _vllm_bench(stack: LocalStack, base: str, backend: str, endpoint: str) -> dict:
    out = stack.home / f"bench-{backend}.json"
    proc = subprocess.run(
        [
            str(RUNTIME_PYTHON), str(ROOT / "tests/serve_apps/vllm_cli.py"), "bench", "serve",
            "--backend", backend, "--base-url", base, "--endpoint", endpoint, "--model", oc.MODEL,
            "--tokenizer", str(tiny_model_path()), "--dataset-name", "random", "--random-input-len", "32",
            "--random-output-len", "16", "--num-prompts", "24", "--max-concurrency", "4", "--ignore-eos",
            "--save-result", "--result-dir", str(stack.home), "--result-filename", out.name,
        ],
        capture_output=True, text=True, timeout=300, cwd=stack.home,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_real_clients_have_zero_failed_requests(stack: LocalStack, llm_endpoint: str) -> None:
    out = stack.home / "openai_clients.json"
    proc = subprocess.run(
        [str(RUNTIME_PYTHON), str(ROOT / "tests/serve_apps/openai_clients.py"), llm_endpoint, oc.MODEL, str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    clients = json.loads(out.read_text())
    for name in ("openai_sdk", "ecs_test_llama", "choices0_loop"):
        assert clients[name]["requests"] > 0 and clients[name]["failed"] == 0, (name, clients[name])
    for backend, endpoint in (("openai-chat", "/v1/chat/completions"), ("openai", "/v1/completions")):
        result = _vllm_bench(stack, llm_endpoint, backend, endpoint)
        print(f"vllm bench serve --backend {backend}: {result['completed']} ok, {result['failed']} failed, "
              f"{result['output_throughput']:.0f} tok/s")
        assert result["completed"] == 24 and result["failed"] == 0, (backend, result["failed"])
        assert result["total_output_tokens"] == 24 * 16


def test_the_seeds_request_shapes_work_unchanged(stack: LocalStack, llm_endpoint: str) -> None:
    # KubeRay write-up: curl on /v1/completions (its model name is this endpoint's served name)
    body = f'{{ "model": "{oc.MODEL}", "prompt": "San Francisco is a", "temperature": 0, "stream": false}}'
    curl = subprocess.run(
        ["curl", "-sS", f"{llm_endpoint}/v1/completions", "-H", "Content-Type: application/json", "-d", body],
        capture_output=True, text=True, timeout=60,
    )
    answer = json.loads(curl.stdout)
    assert answer["object"] == "text_completion" and answer["choices"][0]["text"], curl.stdout[:500]
    # llama.cpp write-up: its load generator's chat request (messages only) on the llama.cpp app
    for base in (f"{stack.serve_url}/llamacpp", llm_endpoint):
        resp = httpx.post(
            f"{base}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "What is generative AI?"}], "max_tokens": 8},
            timeout=60,
        )
        assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] is not None, resp.text[:500]
    # ECS write-up: the translator client is test_translator_answers_the_seed_client; its streamed
    # chat client (test_llama.py) runs in test_real_clients_have_zero_failed_requests.
