"""An EKS deploy's cold start from its Ray pods (``raylift.kuberay.cold_start``): the phases come from what the API
server keeps on a pod (Kubernetes docs, "Pod Lifecycle": conditions and their ``lastTransitionTime``, a container's
``state.running.startedAt``); a pod still waiting for a node has no later phase; only pods created since the
deploy's write count."""

from __future__ import annotations

from datetime import UTC, datetime

from raylift.kuberay.cold_start import pod_cold_start, pods_cold_start, summary_line
from tests.fixtures.kube_rayclusters import ray_pod

T0 = datetime(2026, 12, 7, 15, 0, tzinfo=UTC).timestamp()

# A worker pod as `kubectl get pod -o json` shows one (trimmed to what is read): an inf2 node took 201 s to join,
# the compile cache's init container 4 s, the Neuron image 95 s to pull and start, Ray 12 s to be ready.
LISTED = {
    "metadata": {"name": "llm-00002-neuron-0", "creationTimestamp": "2026-12-07T15:00:00Z",
                 "labels": {"ray.io/cluster": "llm-00002", "ray.io/node-type": "worker", "ray.io/group": "neuron"}},
    "spec": {"initContainers": [{"name": "neuron-compile-cache-owner"}], "containers": [{"name": "ray-worker"}]},
    "status": {"phase": "Running", "hostIP": "10.0.1.7", "conditions": [
        {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": "2026-12-07T15:03:22Z"},
        {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-12-07T15:03:25Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T15:05:12Z"},
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-12-07T15:05:12Z"},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-07T15:03:21Z"}],
        "containerStatuses": [{"name": "ray-worker", "state": {"running": {"startedAt": "2026-12-07T15:05:00Z"}}}]},
}


def test_a_pods_phases_come_from_its_conditions_in_the_order_they_happen() -> None:
    cold = pod_cold_start(LISTED)
    assert cold["phases_s"] == {"node_s": 201.0, "init_s": 4.0, "image_and_start_s": 95.0, "ray_ready_s": 12.0}
    assert cold["total_s"] == 312.0 and (cold["cluster"], cold["node_type"], cold["node"]) == (
        "llm-00002", "worker", "10.0.1.7")
    assert summary_line(cold) == ("pod llm-00002-neuron-0 (worker, node 10.0.1.7): total 312 s (node_s 201 s, "
                                  "init_s 4 s, image_and_start_s 95 s, ray_ready_s 12 s)")


def test_a_pod_waiting_for_a_node_has_no_later_phase() -> None:
    pending = ray_pod("w-1", "llm-00002", group="gpu", pod_ip="", host_ip="", times=(T0, T0, T0, T0, T0))
    cold = pod_cold_start(pending)
    assert cold["phases_s"] == dict.fromkeys(("node_s", "init_s", "image_and_start_s", "ray_ready_s"))
    assert cold["total_s"] is None and cold["node"] == ""


def test_only_the_pods_created_since_the_deploys_write_count() -> None:
    old = ray_pod("llm-00001-head", "llm-00001", pod_ip="10.0.200.1", host_ip="10.0.200.1",
                  times=(T0 - 3600, T0 - 3590, T0 - 3590, T0 - 3500, T0 - 3490))
    new = ray_pod("llm-00002-head", "llm-00002", pod_ip="10.0.200.2", host_ip="10.0.200.2",
                  times=(T0 + 5, T0 + 10, T0 + 10, T0 + 40, T0 + 52))
    unstamped = ray_pod("llm-00002-gpu-0", "llm-00002", group="gpu", pod_ip="10.1.0.1", host_ip="10.0.1.1")
    seen = pods_cold_start([old, new, unstamped], since=T0)
    assert [p["pod"] for p in seen] == ["llm-00002-head"]
    assert seen[0]["phases_s"] == {"node_s": 5.0, "init_s": 0.0, "image_and_start_s": 30.0, "ray_ready_s": 12.0}


def test_the_benchmark_report_has_a_table_of_the_pods_by_phase() -> None:
    from raylift.measure.report import cold_start_html

    page = cold_start_html({"app": "llm", "replicas": [], "pods": [pod_cold_start(LISTED)]})
    assert '<table id="cold-start-pods"' in page and "<td>llm-00002-neuron-0</td>" in page
    assert "<td>201.0</td>" in page and "<td>312.0</td>" in page and '<table id="cold-start"' not in page
    assert cold_start_html({"app": "llm", "replicas": [], "pods": []}) == ""  # nothing started: no section
