"""The serve apps that run no vLLM engine, through the real raylift_deploy DAG on target=local, on ONE local stack.

The translator and the llama.cpp app are deployed side by side on one Ray cluster (translator on "/",
llama.cpp on "/llamacpp"), each answering its smoke test and its seed's client; a GPU profile is refused by the
deploy step before anything is applied; and a new translator version is rolled out under a bounded load with zero
failed requests. No vLLM engine starts here, so tools/test.sh runs this module in the lane beside the engine
tests (the vLLM LLM app's fidelity and clients are test_serve_apps'; its pipeline is test_local_pipeline's).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.harness.local_stack import LocalStack, make_stack, stop_cluster
from tests.integration.conftest import deployed_app, run_ok
from tests.serve_apps.models import tiny_gguf_dir, tiny_t5_path

pytestmark = pytest.mark.integration

# 23xxx: bench/airflow_overhead.py's stack uses it too (benches and the suite do not run at once); every other
# base up to 29xxx is a test module's or the unit tests' that run beside this lane
PORT_BASE = 23000
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
    s = make_stack(tmp_path_factory.mktemp("apps"), port_base=PORT_BASE, warm_cli=True)
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


def running_replicas(stack: LocalStack, app: str, deployment: str) -> int:
    replicas = deployed_app(stack, app)["deployments"][deployment]["replicas"]
    return sum(r["state"] == "RUNNING" for r in replicas)


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


def test_the_llamacpp_seeds_chat_request_works_unchanged(stack: LocalStack) -> None:
    """The llama.cpp write-up's load generator sends messages only (no model, no other field)."""
    resp = httpx.post(
        f"{stack.serve_url}/llamacpp/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "What is generative AI?"}], "max_tokens": 8},
        timeout=60,
    )
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] is not None, resp.text[:500]


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

    The deploy step applies it start-before-stop (raylift.release.rollout: Serve's max_surge_percent for one
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
