"""raylift's launcher: the script side of :mod:`raylift.local.isolated` (read its doc for the design and why).

Run by the target's Python as ``python [-I -S] launcher.py --status FD --exec|--wait|--module --avoid PIDS
[--strict] -- ARGV...``. It imports only what the interpreter has loaded at start-up already (``os``, ``sys``,
``time``) and, for Landlock, ``ctypes`` and ``struct``: in ``--module`` mode it is the check's own interpreter, so
everything it imported is an import the check no longer pays, and nothing else is added to the check's start-up.
"""

from __future__ import annotations

import os
import sys
import time

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
    import struct

    if os.uname().sysname != "Linux" or os.uname().machine not in ("x86_64", "aarch64"):
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


def _launch(status_fd: int, mode: str, avoid: set[int], strict: bool, argv: list[str]) -> None:
    """The launcher's side (run as a script): fork the keeper, exit; the keeper runs ``argv`` once adopted.

    ``mode``: ``exec`` (the keeper becomes ``argv``), ``wait`` (it runs ``argv`` as its child and reports its exit
    status and CPU time), ``module`` (as ``wait``, but the child runs module ``argv[0]`` with arguments ``argv[1:]`` in
    this already started Python, as ``python -m`` would: the same interpreter and site, one start-up fewer).
    ``strict``: run nothing when the adopter is one of ``avoid`` (the worker's ancestors)."""
    os.set_inheritable(status_fd, False)  # never the target's
    landlock = enter_landlock()
    launcher = os.getpid()
    if os.fork() != 0:
        os._exit(0)  # the keeper is adopted as soon as this returns
    os.setsid()  # its own session and process group: the caller stops the group
    deadline = time.monotonic() + 10.0
    while os.getppid() == launcher and time.monotonic() < deadline:
        time.sleep(0.0002)
    status = os.fdopen(status_fd, "w", buffering=1)
    if os.getppid() == launcher or os.getppid() in avoid:
        status.write("adopted-by-ancestor\n")
        if strict:
            status.write(f"error the process that adopted it (pid {os.getppid()}) is one of the worker's own "
                         "ancestors, whose environment it could read; nothing was run\n")
            os._exit(126)
    status.write(f"landlock {'on' if landlock else 'off'}\n")
    if mode == "exec":  # become the target: its pid is this one; the status pipe closes at exec
        status.write(f"pid {os.getpid()}\n")
        status.flush()
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            status.write(f"error {exc}\n")
            os._exit(127)
    status.flush()
    child = os.fork()
    if child == 0:  # the target; stdin/out/err: the caller's pipes, inherited
        status.close()
        if mode == "module":
            import runpy

            sys.argv = list(argv)
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
            sys.exit(0)  # SystemExit and exceptions end it as they end `python -m`
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    status.write(f"pid {child}\n")
    _, wait_status, usage = os.wait4(child, 0)  # its CPU time: the worker cannot count a process it did not reap
    status.write(f"cpu {usage.ru_utime + usage.ru_stime:.6f}\n")
    status.write(f"rc {os.waitstatus_to_exitcode(wait_status)}\n")
    status.close()
    os._exit(0)


def _main(args: list[str]) -> None:
    split = args.index("--")
    opts, argv = args[:split], args[split + 1:]
    status_fd = int(opts[opts.index("--status") + 1])
    avoid = {int(p) for p in opts[opts.index("--avoid") + 1].split(",") if p}
    mode = next(m for m in ("exec", "wait", "module") if f"--{m}" in opts)
    if mode == "module":  # as `python -m`: the working directory first on the path, not this file's folder
        sys.path[0] = os.getcwd()
    _launch(status_fd, mode, avoid, "--strict" in opts, argv)


if __name__ == "__main__":
    _main(sys.argv[1:])
