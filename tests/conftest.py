"""Shared fixtures: real servers on 127.0.0.1 (moto), isolated raylift state per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from bench.harness.moto_server import aws_env, moto_server, reset


@pytest.fixture(scope="session")
def moto_url() -> Iterator[str]:
    with moto_server() as url:
        yield url


@pytest.fixture()
def aws(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A clean moto state and an environment whose AWS calls all go to it. Yields the endpoint URL."""
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


@pytest.hookimpl(trylast=True)  # after -k / -m deselection
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A run with every moto-backed test records their AWS calls itself, for the IAM test (run last)."""
    from tests.infra import aws_calls

    aws_calls.plan_in_session(config, items)
