"""Start a process that loads user or model code where the Airflow worker's secrets are out of its reach.

Why: the engine-args check imports a model repo's own code (``trust_remote_code``) and a local Ray node runs the
replicas' code. A scrubbed environment alone is undone by reading ``/proc/<parent>/environ``: a process's first
environment stays readable there by its own uid for as long as it lives, and the worker's (and its ancestors':
the task supervisor, the Celery or standalone process) holds ``RAY_AUTH_TOKEN``, AWS keys, ``AIRFLOW_CONN_*``.

The design, in three layers (each one cheap, none needing root or another uid):

1. **A clean re-exec, then a double fork that leaves the worker's process tree.** The worker starts this file with
   the target's minimal environment (never its own); this *launcher* forks a *keeper* in a new session and exits,
   and the keeper waits until it has been adopted (by init or the nearest subreaper) before it starts the target.
   So the target's parent chain is keeper -> adopter: no process in it ever held the worker's environment. A
   launcher adopted by one of the worker's own ancestors (a worker run as PID 1 without an init) says so, and
   the caller refuses to run model code there.
2. **A Landlock domain** (Linux >= 5.13, unprivileged, inherited across fork and exec): a process inside it may not
   ptrace, or open ``/proc/<pid>/mem`` of, any process outside it (the worker's memory, where secrets read after
   start-up live), and (Landlock ABI >= 6) may not signal one. Where the kernel has no Landlock, this layer is
   skipped and said on the status line; layers 1 and 3 still hold.
3. **A minimal environment**, chosen by the caller (``raylift.secrets.child_env`` and what the target needs).

What it does not cover: another process of the same uid that is not an ancestor (a sibling task, the scheduler, and
the adopter itself: PID 1 of a container holds the container's environment) is still readable through its
``/proc/<pid>/environ`` by that uid; Landlock's ptrace rule does not cover ``environ`` (seen on Linux 6.18: ``mem``
refused, ``environ`` read). Only another uid, or those processes made not dumpable, closes that (the official Airflow
image runs every component as one uid): keep secrets out of the container's environment (a secrets backend).

The launcher is ``launcher.py`` beside this file (stdlib only), run by the target's Python, so it imports nothing of
raylift's or the worker's; for ``python -m module`` targets (the check) it runs the module in its own interpreter
(one start-up, as before: what isolation adds is two forks and the Landlock calls, ~10 ms, bench/check_isolation.py).
Its protocol with :func:`run_isolated` / :func:`spawn_isolated` is the status pipe (``--status FD``): ``pid N`` (the
target's pid), ``adopted-by-ancestor``, ``landlock on|off``, then ``cpu S`` and ``rc N`` when the keeper waited for
the target, or end-of-file at the target's exec when it did not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LAUNCHER = Path(__file__).with_name("launcher.py")  # the script, stdlib only: see its doc

@dataclass(frozen=True)
class Isolation:
    """What the launcher reported about the process it started."""

    pid: int
    landlock: bool
    adopted_by_ancestor: bool  # the keeper's adopter is one of the worker's own ancestors (no init above it)
    cpu_s: float | None = None  # the target's CPU time (user + system, its children's it waited for included)


class IsolationError(RuntimeError):
    """The launcher could not start the process (the message names why)."""


class AdoptedByAncestorError(IsolationError):
    """``strict``: the process would have been adopted by one of the worker's own ancestors; nothing was run."""


def _ancestors() -> set[int]:
    """This process and its ancestors' pids (from /proc/<pid>/stat)."""
    found, pid = set(), os.getpid()
    while pid > 0 and pid not in found:
        found.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return found


def _pid1_is_init() -> bool:
    """Whether PID 1 is an init, not Airflow itself (a container whose entry point is ``airflow ...``, which then
    adopts the keeper and holds the worker's environment): by its command line, which any process may read."""
    if os.getpid() == 1:
        return False
    try:
        argv = Path("/proc/1/cmdline").read_bytes().split(b"\0")
    except OSError:
        return True  # no /proc: nothing to read an environment through either
    program = Path(argv[0].decode(errors="replace")).name if argv and argv[0] else ""
    return not program.startswith(("python", "airflow", "celery", "gunicorn", "uvicorn"))


def _command(python: Path, status_fd: int, mode: str, argv: Sequence[str], strict: bool = False) -> list[str]:
    # PID 1 adopts orphans wherever there is no subreaper: an ancestor of every process, it counts as the worker's
    # own unless it is an init (a container whose entry point is Airflow itself has none)
    avoid = ",".join(str(p) for p in sorted(_ancestors() - ({1} if _pid1_is_init() else set())))
    opts = ["--status", str(status_fd), f"--{mode}", "--avoid", avoid, *(["--strict"] if strict else []), "--"]
    if mode == "module":  # the launcher is the target's Python, started as `python -m` starts it (site, path)
        return [str(python), str(LAUNCHER), *opts, *argv]
    return [str(python), "-I", "-S", str(LAUNCHER), *opts, *argv]


def _read_status(text: str) -> tuple[dict[str, str], list[str]]:
    fields: dict[str, str] = {}
    flags: list[str] = []
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value:
            fields[key] = value
        else:
            flags.append(key)
    return fields, flags


def run_isolated(argv: Sequence[str], *, python: Path, env: Mapping[str, str], cwd: Path | None = None,
                 timeout: float, strict: bool = False) -> tuple[subprocess.CompletedProcess[str], Isolation]:
    """Run ``argv`` to its end outside the worker's process tree (see the module's doc), its output captured as
    ``subprocess.run(..., capture_output=True, text=True)`` would, with ``env`` as its whole environment.
    ``strict``: refuse (IsolationError, nothing run) where the process would be adopted by one of the worker's
    own ancestors (no init above the worker), as for model code the connection allowed.

    :raises subprocess.TimeoutExpired: it ran past ``timeout`` (its process group was killed).
    :raises IsolationError: the launcher could not start it."""
    # `python -m module ...` by the launcher's own Python: run in it, one interpreter start-up fewer
    module = len(argv) > 2 and argv[0] == str(python) and argv[1] == "-m"
    mode, target = ("module", list(argv[2:])) if module else ("wait", list(argv))
    read_end, write_end = os.pipe()
    try:
        launcher = subprocess.Popen(
            _command(python, write_end, mode, target, strict), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=dict(env), cwd=cwd, pass_fds=(write_end,), stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    with os.fdopen(read_end) as status_pipe:
        try:
            out, err = launcher.communicate(timeout=timeout)  # EOF: when the target and its keeper closed them
        except subprocess.TimeoutExpired:
            fields, _ = _read_status(_read_available(status_pipe))
            if "pid" in fields:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(os.getpgid(int(fields["pid"])), signal.SIGKILL)
            launcher.kill()
            launcher.communicate()
            raise
        fields, flags = _read_status(status_pipe.read())
    if strict and "adopted-by-ancestor" in flags:
        raise AdoptedByAncestorError(fields.get("error", "adopted by one of the worker's ancestors"))
    if "error" in fields or "rc" not in fields or "pid" not in fields:
        raise IsolationError(
            f"could not start {argv[0]} through raylift's launcher ({LAUNCHER}): "
            f"{fields.get('error') or (err or out)[-500:] or 'it reported no exit status'}")
    done = subprocess.CompletedProcess(list(argv), int(fields["rc"]), out, err)
    return done, Isolation(int(fields["pid"]), fields.get("landlock") == "on", "adopted-by-ancestor" in flags,
                           float(fields["cpu"]) if "cpu" in fields else None)


def _read_available(pipe: IO[str]) -> str:
    """What the status pipe holds now, without waiting for its end (the keeper still runs)."""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    try:
        return os.read(fd, 65536).decode(errors="replace")
    except BlockingIOError:
        return ""


def spawn_isolated(argv: Sequence[str], *, python: Path, env: Mapping[str, str], cwd: Path, log_path: Path,
                   timeout: float = 30.0) -> Isolation:
    """Start ``argv`` outside the worker's process tree and return once it is exec'd, not waiting for its end:
    a long-lived process (a Ray node) in its own session (its pid is its process group), output appended to
    ``log_path``. The caller records and stops it by the pid returned.

    :raises IsolationError: the launcher could not start it."""
    read_end, write_end = os.pipe()
    try:
        with log_path.open("ab") as out:
            launcher = subprocess.Popen(
                _command(python, write_end, "exec", argv), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=dict(env), cwd=cwd, pass_fds=(write_end,))
    finally:
        os.close(write_end)
    with os.fdopen(read_end) as status_pipe:
        text = status_pipe.read()  # EOF at the target's exec (close-on-exec) or at the keeper's exit
    launcher.wait(timeout=timeout)
    fields, flags = _read_status(text)
    if "error" in fields or "pid" not in fields or launcher.returncode != 0:
        raise IsolationError(
            f"could not start {argv[0]} through raylift's launcher ({LAUNCHER}): "
            f"{fields.get('error') or f'launcher exit {launcher.returncode}; see {log_path}'}")
    return Isolation(int(fields["pid"]), fields.get("landlock") == "on", "adopted-by-ancestor" in flags)
