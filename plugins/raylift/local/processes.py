"""Which process a recorded pid names now: raylift signals a process it started only while the pid is still it.

Once a process exits, the kernel may give its pid to any later process, so the pid in a stale record (a
``nodes.json`` left by a crash or a reboot) can name someone else's process. A :class:`ProcessRecord` keeps, with
the pid, the process's start time and command line, read from the process right after it started; a live process
is the recorded one only when both are the same. The start time is the kernel's own: clock ticks from boot to the
process's start (``/proc/<pid>/stat`` field 22), fixed for the process's life and exact (psutil's create time, in
hundredths of a second, where there is no ``/proc``). A record is read only on the machine that wrote it.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROC = Path("/proc")


@dataclass(frozen=True)
class LiveProcess:
    """What the kernel says about the process that runs as a pid now."""

    start_time: int
    cmdline: tuple[str, ...]  # empty for a zombie
    zombie: bool

    @classmethod
    def read(cls, pid: int) -> LiveProcess | None:
        """The process running as ``pid``; None when there is none (or it cannot be seen)."""
        if (PROC / "self/stat").exists():
            try:
                stat = (PROC / str(pid) / "stat").read_text()
                raw = (PROC / str(pid) / "cmdline").read_bytes()
            except OSError:
                return None
            fields = stat.rpartition(")")[2].split()  # the name in parentheses may hold spaces and ')'
            text = raw.decode("utf-8", "surrogateescape")
            argv = tuple(text[:-1].split("\0") if text.endswith("\0") else text.split("\0")) if text else ()
            return cls(start_time=int(fields[19]), cmdline=argv, zombie=fields[0] == "Z")
        import psutil

        try:
            proc = psutil.Process(pid)
            with proc.oneshot():
                start, zombie = round(proc.create_time() * 100), proc.status() == psutil.STATUS_ZOMBIE
                argv = () if zombie else tuple(proc.cmdline())
        except psutil.Error:
            return None
        return cls(start_time=start, cmdline=argv, zombie=zombie)


def working_dir(pid: int) -> Path | None:
    """The working directory of the process running as ``pid``; None when it cannot be read."""
    try:
        return Path(os.readlink(PROC / str(pid) / "cwd"))
    except OSError:
        pass
    import psutil

    try:
        return Path(psutil.Process(pid).cwd())
    except psutil.Error:
        return None


def _words(argv: tuple[str, ...]) -> tuple[str, ...]:
    """A command line as words: a process that sets its title (setproctitle rewrites argv's memory, and the
    kernel then shows one space-joined string, or the same words padded) still runs the same command."""
    return tuple(" ".join(argv).split())


@dataclass(frozen=True)
class ProcessRecord:
    """A process raylift started: its pid, start time and command line (``start_time`` None: only the pid is
    known, from an older raylift's record or a process that had exited before it could be read)."""

    pid: int
    start_time: int | None = None
    cmdline: tuple[str, ...] = ()

    @classmethod
    def of(cls, pid: int) -> ProcessRecord:
        """Record the process that runs as ``pid`` now: call it right after starting the process."""
        live = LiveProcess.read(pid)
        # right after an exec the kernel may show an empty command line for a moment (the new image is being
        # mapped): read again until it shows one, so the record holds what the process runs
        for _ in range(40):
            if live is None or live.zombie or live.cmdline:
                break
            time.sleep(0.05)
            live = LiveProcess.read(pid)
        if live is None:
            return cls(pid)
        return cls(pid, live.start_time, live.cmdline)

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "start_time": self.start_time, "cmdline": list(self.cmdline)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProcessRecord:
        start = data.get("start_time")
        return cls(int(data["pid"]), None if start is None else int(start), tuple(data.get("cmdline") or ()))

    def not_it(self, live: LiveProcess | None) -> str | None:
        """Why ``live`` (the process running as this record's pid) is not the recorded process; None when it is,
        an exited one not yet reaped (a zombie, whose pid is not reused while it lasts) included."""
        if live is None:
            return f"no process runs as pid {self.pid}"
        if self.start_time is None:
            return (f"its record has no start time, so the process now running as pid {self.pid} "
                    f"({' '.join(live.cmdline)[:200]!r}) cannot be told from another one given a reused pid")
        if live.start_time != self.start_time:
            return (f"pid {self.pid} was reused: the process running as it now started at tick {live.start_time}, "
                    f"not {self.start_time} ({' '.join(live.cmdline)[:200]!r})")
        if live.cmdline and self.cmdline and _words(live.cmdline) != _words(self.cmdline):
            return (f"pid {self.pid} runs {' '.join(live.cmdline)[:200]!r}, not the recorded "
                    f"{' '.join(self.cmdline)[:200]!r}")
        return None

    def running(self) -> bool:
        """Whether the recorded process still runs (not a zombie, and its pid not given to another process)."""
        live = LiveProcess.read(self.pid)
        return live is not None and not live.zombie and self.not_it(live) is None

    def signal_group(self, sig: signal.Signals) -> str | None:
        """Send ``sig`` to the process group the recorded process leads (it was started in a session of its own),
        only if its pid still names it; returns why nothing was sent otherwise."""
        why = self.not_it(LiveProcess.read(self.pid))
        if why is not None:
            return why
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            return f"process group {self.pid} is gone"
        return None
