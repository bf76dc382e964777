"""The vLLM LLM app through the real raylift_deploy DAG on target=local: serving fidelity and real clients.

One list of requests (tests/serve_apps/openai_conformance.py) goes first to plain vLLM's own OpenAI server on the
same tiny model (started, recorded and stopped before the app deploys: one engine at a time on this box), then to
the app on "/llm", and each answer must have the same effect; real clients (the official openai SDK, vLLM's own
`bench serve` with both OpenAI backends, llmperf's choices[0] loop) and the seeds' request shapes get 0 failed
requests; the replica runs its model in one vLLM engine process. (The apps without a vLLM engine, translator and
llama.cpp, are test_translator_and_llamacpp's; the LLM app's deploy/rollback/reliability pipeline is
test_local_pipeline's.)
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest

from tests.harness.local_stack import ROOT, LocalStack, make_stack, stop_cluster, tiny_model_path
from tests.integration.conftest import PlainVllm, deployed_app, run_ok
from tests.serve_apps import openai_conformance as oc
from tests.serve_apps.models import RUNTIME_PYTHON

pytestmark = pytest.mark.integration

PORT_BASE = 27000


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    s = make_stack(tmp_path_factory.mktemp("apps"), port_base=PORT_BASE, warm_cli=True)
    try:
        yield s
    finally:
        stop_cluster(s)


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
            "workers": 0,  # the head's CPUs hold the one vLLM replica (1 CPU)
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
    # llama.cpp write-up: its load generator's chat request (messages only), here on the vLLM app (on the llama.cpp
    # app: test_translator_and_llamacpp)
    resp = httpx.post(
        f"{llm_endpoint}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "What is generative AI?"}], "max_tokens": 8},
        timeout=60,
    )
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] is not None, resp.text[:500]
    # ECS write-up: the translator client is test_translator_and_llamacpp's; its streamed chat client (test_llama.py)
    # runs in test_real_clients_have_zero_failed_requests.
