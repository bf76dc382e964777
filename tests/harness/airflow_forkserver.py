"""A warm Airflow CLI for one stack: each command runs in a child forked from an interpreter that has already paid
Airflow's start-up.

Why: a plain ``airflow dags test`` of the one-task ``raylift_teardown`` costs 16.4-17.4 CPU-s here, of which ~15 are
the same every time: importing Airflow and its CLI, building the in-process Execution API (Cadwyn generates a router per
API version) and that API's first request. The integration tests run ``dags test`` ~16 times in the serial engine
lane. Forked from a server that paid this once (11.7 CPU-s), the same command costs 2.3-2.4 CPU-s
(``bench/airflow_cli_warm.py``). Airflow forks its own task runners from a warm parent the same way (LocalExecutor,
Celery's prefork pool); the child runs Airflow's own ``main()`` with the command's argv, so what runs is the CLI a
user runs. The DAG folder is still parsed in every child, so raylift's code is never stale.

The server is started with the stack's environment (:meth:`AirflowForkServer.prestart`, so its warm-up overlaps what
the fixture does next, or on the first command) and serves only that environment: a command with another one (a
fixture added a connection) restarts it with the new one (:meth:`AirflowForkServer.run`).

Protocol: one Unix-socket connection per command. The client sends one JSON line (argv, cwd, the output files); the
server forks, answers ``{"pid": N}``, and when the child ends ``{"rc": N, "cpu_s": S}``. The server stays single-threaded, so
every fork happens with one thread in the process.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

READY = "forkserver ready"


class AirflowForkServer:
    """The client side: starts the server for an environment (:meth:`prestart`, or the first command), runs commands
    through it, stops it on close."""

    def __init__(self, python: Path, run_dir: Path) -> None:
        self.python, self.run_dir = python, run_dir
        self.env: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.socket_path = Path(tempfile.mkdtemp(prefix="rl-afs-")) / "s"  # short: AF_UNIX paths are <= 107 bytes
        self.n = 0
        self.ready = False
        self.last_cpu_s = 0.0
        atexit.register(self.close)

    def prestart(self, env: Mapping[str, str]) -> None:
        """Start warming up for ``env`` now, in the background: the first command then waits only for what is left."""
        if self.proc is not None and (dict(env) != self.env or self.proc.poll() is not None):
            self.close()
        if self.proc is None:
            self.env = dict(env)
            self.socket_path.unlink(missing_ok=True)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            with (self.run_dir / "forkserver.log").open("ab") as log:
                self.proc = subprocess.Popen([str(self.python), __file__, str(self.socket_path)], env=self.env,
                                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log)
            self.ready = False

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        if not self.ready:
            line = self.proc.stdout.readline().decode()
            if not line.startswith(READY):
                self.close()
                raise RuntimeError(f"the Airflow fork server did not start: {line!r}; see "
                                   f"{self.run_dir}/forkserver.log")
            self.ready = True

    def close(self) -> None:
        """Stop the server (only ours: the process this object started)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self.ready = False

    def run(self, args: Sequence[str], env: Mapping[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
        """``airflow *args`` as ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)`` would."""
        self.prestart(env)  # a no-op when the server for this environment runs: else (re)started for it
        self._wait_ready()
        self.n += 1
        out, err = (self.run_dir / f"cli-{self.n}.{kind}" for kind in ("out", "err"))
        request = {"argv": ["airflow", *args], "cwd": os.getcwd(), "stdout": str(out), "stderr": str(err)}
        deadline = time.monotonic() + timeout
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(self.socket_path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            replies = conn.makefile("rb")
            pid = json.loads(replies.readline())["pid"]
            conn.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                line = replies.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)  # our own child, as subprocess.run kills its own on a timeout
                raise subprocess.TimeoutExpired(request["argv"], timeout, output=_read(out), stderr=_read(err)) from None
            if not line:
                raise RuntimeError(f"the Airflow fork server ended during {args}; see {self.run_dir}/forkserver.log")
            done = json.loads(line)
        self.last_cpu_s = done["cpu_s"]  # the command's own CPU (its process and the children it waited for)
        rc = done["rc"]
        return subprocess.CompletedProcess(request["argv"], rc, _read(out), _read(err))


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


# -- the server (run as a script with the stack's environment) -----------------------------------------------------
def _warm() -> None:
    """Pay what every CLI run pays: Airflow's and its CLI's imports, the in-process Execution API and its first
    request (the request runs on a loop that is closed again: no thread outlives it)."""
    import asyncio

    import airflow.__main__  # noqa: F401
    import httpx
    from airflow.cli import cli_parser  # noqa: F401
    from airflow.sdk.execution_time.supervisor import in_process_api_server

    app = in_process_api_server().app

    async def first_request() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://in-process") as c:
            (await c.get("/health")).raise_for_status()

    asyncio.run(first_request())


def _child(request: Mapping[str, Any], listener: socket.socket, conns: Sequence[socket.socket]) -> None:
    """In the forked child: become ``airflow <argv>`` and exit with its code. Never returns."""
    code = 1
    try:
        listener.close()
        for c in conns:
            c.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.chdir(request["cwd"])
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.argv = list(request["argv"])
        from airflow.__main__ import main

        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - as the interpreter does with an uncaught error: the trace, exit 1
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()  # what the interpreter runs at exit (log handlers, the DB pool)
    except BaseException:  # noqa: BLE001 - a failure of this function itself: the child must exit all the same
        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)


def serve(socket_path: str) -> None:
    _warm()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(READY, flush=True)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    parent = os.getppid()
    while os.getppid() == parent:  # the caller's process ended without closing us: so do we
        for _key, _events in sel.select(timeout=0.2):
            conn, _addr = listener.accept()
            request = json.loads(conn.makefile("rb").readline())
            pid = os.fork()
            if pid == 0:
                _child(request, listener, [conn, *children.values()])
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            children[pid] = conn
        while children:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                break
            conn = children.pop(pid)
            done = {"rc": os.waitstatus_to_exitcode(status), "cpu_s": usage.ru_utime + usage.ru_stime}
            try:
                conn.sendall(json.dumps(done).encode() + b"\n")
            except OSError:
                pass  # the caller gave up (its timeout)
            conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
