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
