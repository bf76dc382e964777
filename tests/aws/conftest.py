"""Fixtures for the AWS tests (the stand-ins themselves live in ``tests.aws.standins``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.aws.standins import Proxy, proxy_to


@pytest.fixture()
def s3_proxy(aws: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    """A proxy to moto; ``aws_default`` points at it for the test."""
    with proxy_to(aws) as proxy:
        monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", proxy.conn_json())
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        yield proxy
