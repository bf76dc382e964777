"""A scale-down's drain, decided before Ray is asked: which node a worker is, and whether its Serve replicas fit
on the other nodes. The dashboard is an HTTP stand-in answering with the shapes Ray 2.60's state API and Serve's
REST API give; the drain itself, against real Ray, is in tests/integration/test_local_pipeline.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from raylift.config import LocalSettings
from raylift.errors import ClusterError
from raylift.hooks.ray_dashboard import RayDashboardHook
from raylift.local.cluster import LocalRayCluster
from tests.fixtures.http_standin import JsonHandler, serve_http

HEAD, WORKER = "a" * 56, "b" * 56


def node(node_id: str, head: bool, cpus: float, **extra: float) -> dict[str, Any]:
    return {"node_id": node_id, "state": "ALIVE", "is_head_node": head, "resources_total": {"CPU": cpus, **extra}}


def serve(replicas: list[tuple[str, str]], num_cpus: float | None = 1) -> dict[str, Any]:
    """Serve's applications payload: one deployment whose replicas are (replica id, node id)."""
    options = {} if num_cpus is None else {"num_cpus": num_cpus}
    deployment = {"deployment_config": {"ray_actor_options": options},
                  "replicas": [{"replica_id": rid, "node_id": nid, "state": "RUNNING"} for rid, nid in replicas]}
    return {"applications": {"llm": {"deployments": {"LLMServer": deployment}}}}


@contextmanager
def dashboard(nodes: list[dict[str, Any]], apps: dict[str, Any]) -> Iterator[str]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            if self.path.startswith("/api/v0/nodes"):
                return self._json({"data": {"result": {"result": nodes}}})
            return self._json(apps)

    with serve_http(Handler) as port:
        yield f"http://127.0.0.1:{port}"


def cluster(url: str, tmp_path: Path) -> LocalRayCluster:
    made = LocalRayCluster(LocalSettings(home=tmp_path, runtime_python=tmp_path / "no-runtime/bin/python"))
    made.dashboard = RayDashboardHook(url)
    return made


def test_replica_cpus_reads_serves_placement() -> None:
    payload = serve([("r1", HEAD), ("r2", WORKER)], num_cpus=0.5)
    assert RayDashboardHook.replica_cpus(payload) == {HEAD: {"llm/LLMServer/r1": 0.5}, WORKER: {"llm/LLMServer/r2": 0.5}}
    assert RayDashboardHook.replica_cpus(serve([("r1", HEAD)], num_cpus=None)) == {HEAD: {"llm/LLMServer/r1": 1.0}}
    assert RayDashboardHook.replicas_on(payload, WORKER) == ["llm/LLMServer/r2"]


def test_a_stopping_replica_frees_its_cpus_but_still_holds_its_node() -> None:
    """Serve's STOPPING replica drains (behind HAProxy it stays reachable for Ray's draining period): its CPUs count
    as free for the fit check, but a scale-down must not stop its node until it is gone."""
    payload = serve([("r1", HEAD), ("r2", WORKER)])
    payload["applications"]["llm"]["deployments"]["LLMServer"]["replicas"][1]["state"] = "STOPPING"
    assert RayDashboardHook.replica_cpus(payload) == {HEAD: {"llm/LLMServer/r1": 1.0}}
    assert RayDashboardHook.replicas_on(payload, WORKER) == ["llm/LLMServer/r2"]
    assert RayDashboardHook.replicas_on(payload, HEAD) == ["llm/LLMServer/r1"]


def test_a_worker_is_found_by_its_tag(tmp_path: Path) -> None:
    nodes = [node(HEAD, True, 2), node("c" * 56, False, 1, raylift_worker_1=1), node(WORKER, False, 1, raylift_worker_0=1)]
    with dashboard(nodes, {}) as url:
        assert cluster(url, tmp_path).node_id("worker-0") == WORKER
        assert cluster(url, tmp_path).node_id("worker-2") is None  # two untagged candidates: cannot tell


def test_replicas_that_do_not_fit_elsewhere_refuse_the_scale_down_before_any_drain(tmp_path: Path) -> None:
    # head 2 CPU with 2 replicas, the worker's replica needs 1 more: nowhere to go
    nodes = [node(HEAD, True, 2), node(WORKER, False, 1, raylift_worker_0=1)]
    apps = serve([("r1", HEAD), ("r2", HEAD), ("r3", WORKER)])
    with dashboard(nodes, apps) as url, pytest.raises(ClusterError) as refused:
        cluster(url, tmp_path).drain("worker-0")
    assert "need 1 CPU and the other nodes have 0 free" in str(refused.value)
    assert "llm/LLMServer/r3" in str(refused.value) and "Nothing was stopped" in str(refused.value)


def test_a_worker_without_replicas_is_stopped_without_a_drain(tmp_path: Path) -> None:
    nodes = [node(HEAD, True, 2), node(WORKER, False, 1, raylift_worker_0=1)]
    with dashboard(nodes, serve([("r1", HEAD)])) as url:
        cluster(url, tmp_path).drain("worker-0")  # no `ray drain-node` (the runtime here does not exist)
