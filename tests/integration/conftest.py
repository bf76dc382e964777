"""What the integration modules share: plain vLLM's answers on the tiny model, recorded once per session, and the
serve-app modules' two helpers (a deploy that must succeed, an app as Serve's REST API lists it).

Plain ``vllm serve`` (its API server, llm-cpu.yaml's options and env, weights loaded its default way) is the oracle
of two modules: test_serve_apps compares the LLM app's answer to every conformance request with it, and
test_aws_pipeline compares a replica streaming from the S3 stage with its temperature-0 answers. One engine start
records both (it took ~1 min of the heavy lane per start beside the other lane), and stops before any module's
replica starts: one engine at a time on this box.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.harness.local_stack import ROOT, LocalStack, tiny_model_path
from tests.serve_apps import openai_conformance as oc

# Not a port of any stack: the stacks take 20xxx-29xxx by thousands, the multi-worker heads 30xxx/31xxx at the
# offsets in tests/multiworker/ray_clusters.py, replicas' direct ingress 20-port slots of 30000-30999 (slot 5,
# this one, belongs to no stack's Serve port in the suite)
PLAIN_VLLM_PORT = 30100


@dataclass(frozen=True)
class PlainVllm:
    answers: dict[str, dict[str, Any]]  # the conformance list's effects (oc.record)
    greedy: list[str]  # oc.greedy_texts


@pytest.fixture(scope="session")
def plain_vllm(tmp_path_factory: pytest.TempPathFactory) -> PlainVllm:
    from raylift.serve.config import load_config

    app = load_config(ROOT / "serve_apps/configs/llm-cpu.yaml")["applications"][0]
    cmd, env = oc.plain_vllm_command(tiny_model_path(), PLAIN_VLLM_PORT, app)
    assert "--load-format" not in cmd  # the default loader: the streamer's answers must match it
    started = time.monotonic()
    with oc.running_plain_vllm(cmd, env, PLAIN_VLLM_PORT, tmp_path_factory.mktemp("plain-vllm") / "vllm.log") as url:
        recorded = PlainVllm(answers=oc.record(url), greedy=oc.greedy_texts(url, oc.MODEL))
    print(f"plain vLLM: started, {len(recorded.answers)} requests recorded, stopped in "
          f"{time.monotonic() - started:.1f}s")
    return recorded


def deployed_app(stack: LocalStack, name: str) -> dict:
    apps = httpx.get(f"{stack.dashboard_url}/api/serve/applications/", timeout=10).json()["applications"]
    return apps[name]


def run_ok(stack: LocalStack, conf: dict) -> dict:
    result = stack.dags_test("raylift_deploy", conf, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return stack.run_records()[-1]
