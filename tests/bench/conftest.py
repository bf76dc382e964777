"""Fixtures: the stub OpenAI-compatible server (tests/harness/stub_server.py) in a child process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tests.harness.stub_server import running_stub


@pytest.fixture()
def stub() -> Iterator[Callable[..., str]]:
    """``stub(ttft_ms=.., itl_ms=.., fail_every=.., no_usage=.., max_active=..)`` → base URL."""
    with ExitStack() as stack:

        def start(**options: object) -> str:
            args: list[str] = []
            for key, value in options.items():
                flag = "--" + key.replace("_", "-")
                if value is True:
                    args.append(flag)
                elif value not in (False, None):
                    args += [flag, str(value)]
            return stack.enter_context(running_stub(*args))

        yield start
