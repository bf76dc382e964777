"""raylift's ``cluster_change`` (``raylift.kuberay.upgrade``: will KubeRay start a new Ray cluster?) judged by the
KubeRay model's port of KubeRay v1.7.0's own hash (``tests.kuberay.kuberay_model._hash``:
``utils.GenerateHashWithoutReplicasAndWorkersToDelete`` of ``rayClusterSpecForHashing``): for each kind of change,
raylift says "in place" exactly when KubeRay's hashes are equal."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from raylift.kuberay import manifest as m
from raylift.kuberay.upgrade import ClusterChange, cluster_change
from tests.kuberay.kuberay_model import _hash
from tests.kuberay.serve_configs import serve_config


def spec() -> dict[str, Any]:
    rendered: dict[str, Any] = m.render_rayservice(
        name="llm", namespace="raylift", serve_config=serve_config(), image="123.dkr.ecr/raylift:abc",
        profile="gpu-vllm", workers=2)["spec"]
    return rendered


def worker_pod(s: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = s["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    return pod


CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "replicas": lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].update(replicas=5, minReplicas=5),
    "maxReplicas": lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].update(maxReplicas=3),
    "workersToDelete": lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].update(
        scaleStrategy={"workersToDelete": ["llm-00001-gpu-x"]}),
    "a worker toleration": lambda s: worker_pod(s).setdefault("tolerations", []).append(
        {"key": "kueue", "operator": "Exists"}),
    "a head scheduling gate": lambda s: s["rayClusterConfig"]["headGroupSpec"]["template"]["spec"].update(
        schedulingGates=[{"name": "kueue.x-k8s.io/admission"}]),
    "suspend": lambda s: s["rayClusterConfig"].update(suspend=True),
    "the image": lambda s: [c.update(image="123.dkr.ecr/raylift:def") for c in worker_pod(s)["containers"]],
    "a worker env var": lambda s: worker_pod(s)["containers"][0].setdefault("env", []).append(
        {"name": "X", "value": "1"}),
    "serveConfigV2": lambda s: s.update(serveConfigV2=s["serveConfigV2"] + "\n# changed"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_raylift_says_in_place_exactly_when_kuberays_hash_is_unchanged(change: str) -> None:
    old = spec()
    new = copy.deepcopy(old)
    CHANGES[change](new)
    kuberay_same = _hash(old) == _hash(new)
    assert (cluster_change(old, new) is ClusterChange.IN_PLACE) == kuberay_same, (change, kuberay_same)
