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

What it does not cover: another process of the same uid that is not an ancestor (a sibling task, the scheduler)
is still readable through its ``/proc/<pid>/environ`` by that uid; only another uid, or the worker made not
dumpable, closes that (the official Airflow image runs every component as one uid).

The file is stdlib only and runs as a script under the runtime env's Python (``python -I -S isolated.py``), so it
imports nothing of raylift's or the worker's. Its protocol with :func:`run_isolated` / :func:`spawn_isolated` is
the status pipe (``--status FD``): ``pid N`` (the target's pid), ``adopted-by-ancestor``, ``landlock on|off``,
then ``rc N`` when the keeper waited for the target, or end-of-file at the target's exec when it did not.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

LAUNCHER = Path(__file__)

# <linux/landlock.h>
_SYS_CREATE_RULESET, _SYS_RESTRICT_SELF = 444, 446
_CREATE_RULESET_VERSION = 1
_ACCESS_FS_MAKE_CHAR, _ACCESS_FS_MAKE_BLOCK = 1 << 6, 1 << 11
_SCOPE_SIGNAL = 1 << 1
_PR_SET_NO_NEW_PRIVS = 38


def enter_landlock() -> bool:
    """Put this process (and all it starts) in a Landlock domain; False where the kernel offers none.

    The domain's only file rule refuses creating device nodes (nothing raylift runs does); what matters is the
    domain itself, which the kernel's Landlock ptrace hook keeps from any process outside it, and (ABI >= 6) the
    signal scope. See the kernel's Documentation/userspace-api/landlock.rst and security/landlock/task.c."""
    import ctypes
    import platform
    import struct

    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        return False  # the syscall numbers above are the generic ones these two share
    libc = ctypes.CDLL(None, use_errno=True)
    abi = int(libc.syscall(_SYS_CREATE_RULESET, None, 0, _CREATE_RULESET_VERSION))
    if abi < 1:
        return False
    attr = struct.pack("QQQ", _ACCESS_FS_MAKE_CHAR | _ACCESS_FS_MAKE_BLOCK, 0, _SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 8  # the struct grew: net access (ABI 4) and scoped (ABI 6) fields
    buf = ctypes.create_string_buffer(attr[:size])
    fd = int(libc.syscall(_SYS_CREATE_RULESET, buf, size, 0))
    if fd < 0:
        return False
    try:
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return int(libc.syscall(_SYS_RESTRICT_SELF, fd, 0)) == 0
    finally:
        os.close(fd)


def _launch(status_fd: int, wait: bool, avoid: set[int], strict: bool, argv: list[str]) -> None:
    """The launcher's side (run as a script): fork the keeper, exit; the keeper runs ``argv`` once adopted.
    ``strict``: run nothing when the adopter is one of ``avoid`` (the worker's ancestors)."""
    os.set_inheritable(status_fd, False)  # never the target's
    landlock = enter_landlock()
    launcher = os.getpid()
    if os.fork() != 0:
        os._exit(0)  # the keeper is adopted as soon as this returns
    os.setsid()  # its own session and process group: the caller stops the group
    deadline = time.monotonic() + 10.0
    while os.getppid() == launcher and time.monotonic() < deadline:
        time.sleep(0.0005)
    status = os.fdopen(status_fd, "w", buffering=1)
    if os.getppid() == launcher or os.getppid() in avoid:
        status.write("adopted-by-ancestor\n")
        if strict:
            status.write(f"error the process that adopted it (pid {os.getppid()}) is one of the worker's own "
                         "ancestors, whose environment it could read; nothing was run\n")
            os._exit(126)
    status.write(f"landlock {'on' if landlock else 'off'}\n")
    if not wait:  # become the target: its pid is this one; the status pipe closes at exec
        status.write(f"pid {os.getpid()}\n")
        status.flush()
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            status.write(f"error {exc}\n")
            os._exit(127)
    try:
        child = subprocess.Popen(argv, close_fds=True)  # stdin/out/err: the caller's pipes, inherited
    except OSError as exc:
        status.write(f"error {exc}\n")
        os._exit(127)
    status.write(f"pid {child.pid}\n")
    status.flush()
    rc = child.wait()
    status.write(f"rc {rc}\n")
    status.close()
    os._exit(0)


@dataclass(frozen=True)
class Isolation:
    """What the launcher reported about the process it started."""

    pid: int
    landlock: bool
    adopted_by_ancestor: bool  # the keeper's adopter is one of the worker's own ancestors (no init above it)


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


def _command(python: Path, status_fd: int, wait: bool, argv: Sequence[str], strict: bool = False) -> list[str]:
    # PID 1 adopts orphans wherever there is no subreaper: an ancestor of every process, it counts only when it is
    # this worker itself (a container whose entry point is Airflow, without an init)
    avoid = ",".join(str(p) for p in sorted(_ancestors() - ({1} if os.getpid() != 1 else set())))
    return [str(python), "-I", "-S", str(LAUNCHER), "--status", str(status_fd), "--wait" if wait else "--exec",
            "--avoid", avoid, *(["--strict"] if strict else []), "--", *argv]


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
    read_end, write_end = os.pipe()
    try:
        launcher = subprocess.Popen(
            _command(python, write_end, True, argv, strict), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
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
    return done, Isolation(int(fields["pid"]), fields.get("landlock") == "on", "adopted-by-ancestor" in flags)


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
                _command(python, write_end, False, argv), stdin=subprocess.DEVNULL, stdout=out,
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


def _main(args: list[str]) -> None:
    split = args.index("--")
    opts, argv = args[:split], args[split + 1:]
    status_fd = int(opts[opts.index("--status") + 1])
    avoid = {int(p) for p in opts[opts.index("--avoid") + 1].split(",") if p}
    _launch(status_fd, "--wait" in opts, avoid, "--strict" in opts, argv)


if __name__ == "__main__":
    _main(sys.argv[1:])
