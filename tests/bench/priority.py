"""Measuring clients ahead of ordinary processes, as the stub server runs (``bench.stub_server._raise_priority``).

A client that wakes late stamps its own delay on a request: on a shared machine that falls on one run's requests and
not the other's. Where raising the priority is not allowed (no root or CAP_SYS_NICE) the client measures as it is.
It does not help against a load in another session when the kernel groups scheduling by session (autogroup); the
suite's lanes share one session.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

CLIENT_NICE = -10  # the stub's own (bench/stub_server.py)


def raise_priority(pid: int = 0) -> int | None:
    """``pid`` (0: this thread) at :data:`CLIENT_NICE`; its previous niceness, or None where not allowed."""
    try:
        before = os.getpriority(os.PRIO_PROCESS, pid)
        os.setpriority(os.PRIO_PROCESS, pid, CLIENT_NICE)
    except OSError:
        return None
    return before


@contextmanager
def raised_priority() -> Iterator[None]:
    """This thread at :func:`raise_priority` while it measures, then as it was."""
    before = raise_priority()
    try:
        yield
    finally:
        if before is not None:
            os.setpriority(os.PRIO_PROCESS, 0, before)
