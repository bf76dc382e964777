"""An EKS deploy's cold start, from the Ray pods it started: how long each waited for a node, for its init containers,
for its image and for Ray to be ready.

Why pods: on EKS most of a first deploy's or a new image's wait is Kubernetes', not Serve's: a node group or Karpenter
adding a GPU node, the kubelet pulling a multi-GB image, Ray starting in the container. The replicas' own phases (vLLM's
timings in their logs) are behind the Ray dashboard inside the cluster, which Airflow does not reach; the pods'
timestamps are in the Kubernetes API it already uses.

The phases come from what the API server keeps on each pod (Kubernetes docs, "Pod Lifecycle": ``status.conditions``
``PodScheduled``, ``Initialized``, ``Ready`` with their ``lastTransitionTime``, and a container's
``state.running.startedAt``), relative to ``metadata.creationTimestamp``:

- ``node_s``: created to ``PodScheduled`` (waiting for a node with room: a node group or Karpenter scaling up);
- ``init_s``: ``PodScheduled`` to ``Initialized`` (the init containers: the Neuron compile cache's owner);
- ``image_and_start_s``: ``Initialized`` to the Ray container's ``startedAt`` (pulling its image, creating it);
- ``ray_ready_s``: ``startedAt`` to ``Ready`` (Ray's readiness probe: the raylet and, on the head, the dashboard).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

PHASES = ("node_s", "init_s", "image_and_start_s", "ray_ready_s")


def _at(value: Any) -> float | None:
    """An RFC 3339 timestamp as the API server writes it (``2026-12-07T15:40:01Z``), in epoch seconds."""
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _condition(status: Mapping[str, Any], kind: str) -> float | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return _at(cond.get("lastTransitionTime"))
    return None


def _started(status: Mapping[str, Any], container: str | None) -> float | None:
    for each in status.get("containerStatuses") or []:
        if container is None or each.get("name") == container:
            return _at(((each.get("state") or {}).get("running") or {}).get("startedAt"))
    return None


def pod_cold_start(pod: Mapping[str, Any]) -> dict[str, Any]:
    """One pod's phases in seconds (``None`` for a phase it has not reached), its total to ``Ready`` and its node."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    spec = pod.get("spec") or {}
    first = ((spec.get("containers") or [{}])[0]).get("name")
    marks = [_at(meta.get("creationTimestamp")), _condition(status, "PodScheduled"),
             _condition(status, "Initialized"), _started(status, first), _condition(status, "Ready")]
    phases: dict[str, float | None] = {}
    for name, (start, end) in zip(PHASES, zip(marks, marks[1:]), strict=True):
        phases[name] = None if start is None or end is None else round(max(end - start, 0.0), 3)
    created, ready = marks[0], marks[-1]
    labels = meta.get("labels") or {}
    return {"pod": str(meta.get("name")), "cluster": str(labels.get("ray.io/cluster") or ""),
            "node_type": str(labels.get("ray.io/node-type") or ""), "node": str(status.get("hostIP") or ""),
            "phases_s": phases,
            "total_s": None if created is None or ready is None else round(max(ready - created, 0.0), 3)}


def pods_cold_start(items: Iterable[Mapping[str, Any]], since: float) -> list[dict[str, Any]]:
    """Each pod created at or after ``since`` (epoch seconds: when the deploy wrote its config, less the clocks'
    skew the caller allows), by name: the pods this deploy started, not the ones that were running before it."""
    out = []
    for pod in items:
        created = _at((pod.get("metadata") or {}).get("creationTimestamp"))
        if created is not None and created >= since:
            out.append(pod_cold_start(pod))
    return sorted(out, key=lambda p: str(p["pod"]))


def summary_line(pod: Mapping[str, Any]) -> str:
    """One line for a task log: ``pod llm-00002-gpu-0 (worker, 10.0.1.7): total 312.4 s = node_s 201.0 s, ...``."""
    from raylift.serve.cold_start import phases_text, seconds_text

    return (f"pod {pod.get('pod')} ({pod.get('node_type') or '?'}, node {pod.get('node') or 'none yet'}): total "
            f"{seconds_text(pod.get('total_s'))} ({phases_text(pod.get('phases_s') or {})})")
