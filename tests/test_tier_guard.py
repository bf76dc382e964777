"""The unit tier's guard (tests/tier_guard.py): what it stops, what it lets through, and that it puts all back."""

from __future__ import annotations

import os
import socket
import subprocess
import threading

import pytest

from tests.tier_guard import Guard, TierViolation


def test_a_subprocess_is_stopped_before_it_starts_naming_the_command() -> None:
    with Guard("t") as guard, pytest.raises(TierViolation, match=r"started a process \(subprocess.Popen \['true'\]\)"):
        subprocess.run(["true"])
    assert guard.seen and "mark the test component" in guard.message(guard.seen[0])


def test_fork_and_a_network_bind_are_stopped_a_unix_socket_is_not() -> None:
    with Guard("t") as guard:
        with pytest.raises(TierViolation, match="os.fork"):
            os.fork()
        with socket.socket() as tcp, pytest.raises(TierViolation, match=r"socket.bind on AF_INET \('127.0.0.1', 0\)"):
            tcp.bind(("127.0.0.1", 0))
        left, right = socket.socketpair()  # AF_UNIX: asyncio's own wake-up pipe is one
        left.close(), right.close()
    assert len(guard.seen) == 2


@pytest.mark.component  # it connects for real from a thread it starts before its own guard (the unit guard would stop it)
def test_a_thread_running_before_the_test_is_not_stopped_one_it_starts_is() -> None:
    go, done = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def connect() -> None:
        go.wait()
        try:
            with socket.socket() as tcp:
                tcp.connect_ex(("127.0.0.1", 9))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        done.set()

    earlier = threading.Thread(target=connect)
    earlier.start()
    with Guard("t") as guard:
        go.set(), done.wait(5)
        assert errors == [] and guard.seen == []
        done.clear()
        later = threading.Thread(target=connect)
        later.start(), later.join(5)
    earlier.join(5)
    assert [type(e) for e in errors] == [TierViolation] and len(guard.seen) == 1


def test_everything_is_put_back_afterwards() -> None:
    before = (subprocess.Popen._execute_child, os.fork, socket.socket.connect, "connect" in vars(socket.socket))
    with Guard("t"):
        assert socket.socket.connect is not before[2]
    assert (subprocess.Popen._execute_child, os.fork, socket.socket.connect,
            "connect" in vars(socket.socket)) == before
