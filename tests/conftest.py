"""Shared fixtures: real servers on 127.0.0.1 (moto), isolated raylift state per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests import tier_guard
from tests.harness import aws_client_cost
from tests.harness.moto_server import aws_env, moto_server, reset


def pytest_configure(config: pytest.Config) -> None:
    """Each test's tier (unit / component / system) as a marker, given before ``-m`` selects by it, and the guard
    that fails a unit test which starts a process or opens a network socket: tests/tier_guard.py."""
    config.pluginmanager.register(tier_guard.TierPlugin(), "raylift-tier-guard")
    _parse_each_terraform_file_once()


def _parse_each_terraform_file_once() -> None:
    """python-hcl2 parses one .tf file in ~0.1-0.5 s, and the Terraform tests (tests/infra) load the same modules
    again for each module they call: 14 of the unit tier's ~40 CPU-seconds. Each text is parsed once per session
    (keyed by its content, so an edited file is parsed again) and each caller gets its own copy."""
    import copy
    import hashlib

    try:
        import hcl2
    except ImportError:
        return
    if getattr(hcl2.load, "_raylift_cached", False):
        return
    parsed: dict[str, dict] = {}
    loads = hcl2.loads

    def load(file: Any, **options: Any) -> dict:
        text = file.read()
        key = hashlib.sha256(repr(sorted(options.items())).encode() + text.encode()).hexdigest()
        if key not in parsed:
            parsed[key] = loads(text, **options)
        return copy.deepcopy(parsed[key])

    load._raylift_cached = True  # type: ignore[attr-defined]
    hcl2.load = load


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture()
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A clean moto state and an environment whose AWS calls all go to it. Yields the endpoint URL."""
    aws_client_cost.install()  # each boto3 client's static costs once per process: tests/harness/aws_client_cost.py
    reset(moto_url)
    for key, value in aws_env(moto_url).items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    yield moto_url


@pytest.fixture(autouse=True)
def _airflow_test_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Unit tests never touch a developer's ~/airflow."""
    if "AIRFLOW_HOME" not in os.environ:
        monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path_factory.getbasetemp() / "airflow"))


# Modules run at the end of their lane: the wheel on the oldest Airflow needs tests/install's airflow-3.1.8 venv and
# wheel, which lane 2 builds (under a file lock, tests/install/envs.py) before the engine lane reaches its end; run
# early, the engine lane built them itself, on its critical path.
RUN_LAST = ("tests/integration/test_installed_wheel.py",)


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """:data:`RUN_LAST` to the end; a run with every moto-backed test records their AWS calls itself, for the IAM
    test (run last)."""
    from tests.infra import aws_calls

    items.sort(key=lambda item: item.nodeid.startswith(RUN_LAST))  # stable: the rest keep their order
    aws_calls.plan_in_session(config, items)


# The tests that run llama-cpp-python in the runtime venv. tools/test.sh builds it in the background (its first build
# compiles the sdist) and names the file its exit status lands in: these tests wait for it, no other test does.
LLAMACPP_TESTS = ("tests/serve_apps/test_llamacpp.py", "tests/integration/test_translator_and_llamacpp.py")


@pytest.hookimpl(tryfirst=True)  # before the module's fixtures start anything
def pytest_runtest_setup(item: pytest.Item) -> None:
    rc_file = os.environ.get("RAYLIFT_LLAMACPP_RC")
    if rc_file and item.nodeid.startswith(LLAMACPP_TESTS):
        wait_for_llamacpp(rc_file)


def wait_for_llamacpp(rc_file: str) -> None:
    import time
    from pathlib import Path

    path = Path(rc_file)
    started = time.monotonic()
    while not path.exists():
        time.sleep(1)
    waited = time.monotonic() - started
    if waited > 1:
        print(f"waited {waited:.0f} s for the llama-cpp-python build (tools/test.sh)")
    if path.read_text().strip() != "0":
        pytest.fail(f"llama-cpp-python's build failed (rc {path.read_text().strip()}): "
                    f"{path.with_name('llamacpp.log')}", pytrace=False)
