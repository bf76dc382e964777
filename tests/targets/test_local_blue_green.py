"""When the local target calls a release a cluster change, and what it refuses before anything changes.

The serving cluster's head is stood in for by a live process recorded as raylift records a node (its pid, start
time and command line), beside the runtime record the head's start writes: what ``running_runtime`` reads. The real
release of a runtime change runs in tests/integration/test_local_blue_green.py."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from raylift.config import LocalSettings
from raylift.errors import ClusterError, RayliftValueError
from raylift.local.processes import ProcessRecord
from raylift.release.plan import plan_release, replaced_in_place
from raylift.targets.local import LocalTarget


@pytest.fixture()
def runtimes(tmp_path: Path) -> tuple[Path, Path]:
    out = []
    for name in ("a", "b"):
        python = tmp_path / name / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text("")
        out.append(python)
    return out[0], out[1]


@pytest.fixture()
def serving_on(tmp_path: Path) -> Iterator[object]:
    """Record a running head in ``<home>/cluster`` on the runtime given."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(runtime: Path) -> None:
        proc = subprocess.Popen(["sleep", "300"])
        procs.append(proc)
        cluster = tmp_path / "home" / "cluster"
        cluster.mkdir(parents=True, exist_ok=True)
        (cluster / "nodes.json").write_text(json.dumps({"head": ProcessRecord.of(proc.pid).to_json()}))
        (cluster / "runtime.json").write_text(json.dumps({"runtime_python": str(runtime)}))

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def settings(tmp_path: Path, runtime: Path, front: int | None = None) -> LocalSettings:
    return LocalSettings(home=tmp_path / "home", runtime_python=runtime, front_port=front)


def test_no_cluster_no_change_and_the_default_runtime(tmp_path: Path, runtimes: tuple[Path, Path]) -> None:
    a, b = runtimes
    t = LocalTarget(settings=settings(tmp_path, a), runtime_python=str(b))
    assert t.cluster_change() is None  # nothing serves: the first start is on b
    assert t.runtime_python == b and t.settings.runtime_python == b
    assert LocalTarget(settings=settings(tmp_path, a)).runtime_python == a


def test_another_runtime_than_the_serving_cluster_runs_is_a_cluster_change(
        tmp_path: Path, runtimes: tuple[Path, Path], serving_on: object) -> None:
    a, b = runtimes
    serving_on(a)  # type: ignore[operator]
    kept = LocalTarget(settings=settings(tmp_path, b))  # no option: keep the runtime the cluster runs
    assert kept.runtime_python == a and kept.cluster_change() is None
    changed = LocalTarget(settings=settings(tmp_path, a), runtime_python=str(b))
    change = changed.cluster_change()
    assert change == f"the runtime env changes ({a} -> {b})"
    assert changed.settings.runtime_python == a  # the serving cluster's own settings keep its runtime
    assert plan_release("canary", "llm", None, {"name": "llm"}, cluster_change=change).kind == "blue_green"
    assert not changed.replaces_cluster_in_place  # release: direct of it is refused by the deploy step
    assert not replaced_in_place("canary") and replaced_in_place("direct") and replaced_in_place(None)


def test_a_blue_green_release_without_the_front_is_refused_naming_the_setting(
        tmp_path: Path, runtimes: tuple[Path, Path], serving_on: object) -> None:
    a, b = runtimes
    serving_on(a)  # type: ignore[operator]
    with pytest.raises(ClusterError, match="Set RAYLIFT_FRONT_PORT"):
        LocalTarget(settings=settings(tmp_path, a), runtime_python=str(b)).blue_green_pair()
    t = LocalTarget(settings=settings(tmp_path, a, front=21990), runtime_python=str(b))
    assert t.blue_green_pair() == ("blue", "green")
    green = t.on_cluster("green")
    assert green.settings.runtime_python == b and green.endpoint_url() == "http://127.0.0.1:8030"
    assert t.endpoint_url() == "http://127.0.0.1:21990"  # clients: the front
    with pytest.raises(ClusterError, match="serves"):
        t.remove_cluster("blue")  # never the serving one


def test_a_runtime_python_that_is_not_there_is_refused(tmp_path: Path, runtimes: tuple[Path, Path]) -> None:
    with pytest.raises(RayliftValueError, match="runtime_python '/nowhere/python' is not a file"):
        LocalTarget(settings=settings(tmp_path, runtimes[0]), runtime_python="/nowhere/python")


def _record_head(cluster_dir: Path, runtime: Path) -> subprocess.Popen[bytes]:
    """A live process recorded as ``cluster_dir``'s Ray head (its own process group, as a node is)."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    cluster_dir.mkdir(parents=True, exist_ok=True)
    (cluster_dir / "nodes.json").write_text(json.dumps({"head": ProcessRecord.of(proc.pid).to_json()}))
    (cluster_dir / "runtime.json").write_text(json.dumps({"runtime_python": str(runtime)}))
    return proc


class WorkerLost(BaseException):
    """The worker running the promote step is lost (killed) at this point."""


def test_the_front_is_switched_after_the_record_and_a_lost_worker_leaves_a_rollback_that_keeps_it_serving(
        tmp_path: Path, runtimes: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Promote's switch: ``<home>/blue_green.json`` names green before the front is switched to it. The worker is
    lost right after the front switched, before the release recorded it: the rollback (stage ``started``) switches
    the front back to blue, still running, and only then stops green; the front never serves a stopped cluster.
    The front is raylift's real HAProxy; two loopback HTTP servers stand for the clusters' Serve ports."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    import httpx

    from raylift.local import front as front_module
    from raylift.local.front import LocalFront
    from raylift.release.blue_green import switch_blue_green, undo_blue_green
    from raylift.release.state import DeploymentState
    from raylift.store import LocalStore
    from tests.serve_apps.models import RUNTIME_PYTHON

    haproxy = front_module.haproxy_binary(Path(RUNTIME_PYTHON))
    monkeypatch.setattr(front_module, "haproxy_binary", lambda *_: haproxy)  # the runtimes here are stand-ins
    a, b = runtimes
    base = LocalSettings(home=tmp_path / "home", runtime_python=a, front_port=31891, serve_port=31811)
    servers = []
    for colour, port in (("blue", 31811), ("green", 31841)):
        class Answer(BaseHTTPRequestHandler):
            name = colour.encode()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self.send_response(200)
                self.send_header("Content-Length", str(len(self.name)))
                self.end_headers()
                self.wfile.write(self.name)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", port), Answer)
        Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    blue = _record_head(base.home / "cluster", a)
    green = _record_head(base.home / "cluster-green", b)
    target = LocalTarget(settings=base, runtime_python=str(b))
    front = target.front()
    try:
        front.ensure("blue")
        state = DeploymentState(LocalStore(tmp_path / "store"), "local", "llm")
        state.save_blue_green("run", {"serving": "blue", "candidate": "green", "stage": "started"})
        real_switch, seen = LocalFront.switch, []

        def switch_then_lost(self: LocalFront, to: str) -> None:
            record = base.home / "blue_green.json"
            seen.append((to, json.loads(record.read_text())["active"] if record.is_file() else "blue (no record)"))
            real_switch(self, to)
            if to == "green":
                raise WorkerLost()

        monkeypatch.setattr(LocalFront, "switch", switch_then_lost)
        with pytest.raises(WorkerLost):
            switch_blue_green(target, state, "run")
        assert seen == [("green", "green")], "the front was switched before the record named the cluster"
        assert httpx.get(front.url, timeout=10).text == "green"
        assert state.blue_green("run")["stage"] == "started"  # the release never recorded the switch

        said = undo_blue_green(LocalTarget(settings=base, runtime_python=str(b)), state, "run")
        assert said is not None and "switched back to the blue cluster" in said, said
        assert {httpx.get(front.url, timeout=10).text for _ in range(4)} == {"blue"}
        assert green.wait(timeout=30) is not None and blue.poll() is None  # green stopped, blue kept
        assert json.loads((base.home / "blue_green.json").read_text())["active"] == "blue"
    finally:
        front.stop()
        for server in servers:
            server.shutdown()
        for proc in (blue, green):
            proc.kill()
            proc.wait()
