"""Measuring clients ahead of ordinary processes, as the stub server runs (``tests.harness.stub_server.raise_priority``).

A client that wakes late stamps its own delay on a request: on a shared machine that falls on one run's requests and
not the other's. Where raising the priority is not allowed (no root or CAP_SYS_NICE) the client measures as it is.
It does not help against a load in another session when the kernel groups scheduling by session (autogroup); the
suite's lanes share one session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from tests.harness.stub_server import CLIENT_NICE, raise_priority

__all__ = ["CLIENT_NICE", "raise_priority", "raised_priority"]


@contextmanager
def raised_priority() -> Iterator[None]:
    """This thread at :func:`raise_priority` while it measures, then as it was."""
    before = raise_priority()
    try:
        yield
    finally:
        if before is not None:
            os.setpriority(os.PRIO_PROCESS, 0, before)
