"""Where Ray placed a canary's two arms, and which arm that placement favours.

A canary is judged by measuring two replicas side by side. On the real local stack the replica that had a Ray
node to itself measured +26 % to +65 % faster than one sharing its node with another replica
(``bench/gate_real_aa.py``, each arm's node recorded), far above any change the gate is meant to see: an
unlike placement alone can pass a slower canary or reject an unchanged one. Ray's scheduler, not raylift,
places Serve replicas across applications, so raylift cannot make the placement alike; it reads it from
Serve's own status and hands :func:`favoured_arm` to :func:`raylift.release.decide`, which refuses the verdicts
the placement could have produced (a pass of the favoured canary, a regression of the disfavoured one).

Replicas that run on accelerators (GPUs, NeuronCores: each replica owns its devices) are not compared: their
node's other replicas do not share the devices that do the work.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

CANDIDATE, BASELINE = "candidate", "baseline"


@dataclass(frozen=True)
class ArmPlacement:
    """One arm's replicas: the Ray nodes they run on, and how many other Serve replicas share those nodes
    (the mean over the arm's replicas)."""

    app: str
    nodes: tuple[str, ...]
    neighbours: float

    def as_dict(self) -> dict[str, Any]:
        return {"app": self.app, "nodes": list(self.nodes), "neighbours": self.neighbours}


@dataclass(frozen=True)
class Placement:
    """Both arms' placement, and the arm it favours (None: alike)."""

    candidate: ArmPlacement
    baseline: ArmPlacement

    @property
    def favoured(self) -> str | None:
        if self.candidate.neighbours < self.baseline.neighbours:
            return CANDIDATE
        if self.candidate.neighbours > self.baseline.neighbours:
            return BASELINE
        return None

    def describe(self) -> str:
        def arm(label: str, p: ArmPlacement) -> str:
            return (f"the {label} ({p.app}) on node(s) {', '.join(n[:8] for n in p.nodes) or '?'} with "
                    f"{p.neighbours:g} other replica(s)")

        return f"{arm(CANDIDATE, self.candidate)}, {arm(BASELINE, self.baseline)}"

    def as_dict(self) -> dict[str, Any]:
        return {CANDIDATE: self.candidate.as_dict(), BASELINE: self.baseline.as_dict(),
                "favoured": self.favoured, "described": self.describe()}


def _running_replicas(applications: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(app, node_id)`` of every RUNNING replica in Serve's applications status (the dashboard's
    ``/api/serve/applications/`` ``applications``)."""
    out: list[tuple[str, str]] = []
    for name, app in applications.items():
        for deployment in ((app or {}).get("deployments") or {}).values():
            for replica in (deployment or {}).get("replicas") or []:
                if str(replica.get("state", "RUNNING")) == "RUNNING" and replica.get("node_id"):
                    out.append((str(name), str(replica["node_id"])))
    return out


def arm_placement(applications: Mapping[str, Any], app: str) -> ArmPlacement | None:
    """Where ``app``'s running replicas are and how crowded their nodes are; None: it has none running."""
    replicas = _running_replicas(applications)
    per_node = Counter(node for _, node in replicas)
    own = [node for name, node in replicas if name == app]
    if not own:
        return None
    return ArmPlacement(app, tuple(sorted(set(own))), sum(per_node[node] - 1 for node in own) / len(own))


def uses_accelerators(apps: Iterable[Mapping[str, Any]]) -> bool:
    """Whether any deployment of ``apps`` (Serve config applications) asks for GPUs or NeuronCores."""
    from raylift.serve.validation import ACCELERATORS, app_needs

    return any(need.per_replica().get(unit, 0.0) > 0 for app in apps for need in app_needs(app)
               for unit in ACCELERATORS)


def arms_placement(applications: Mapping[str, Any], candidate: str, baseline: str) -> Placement | None:
    """Both arms' placement from Serve's applications status; None when either arm has no running replica."""
    cand, base = arm_placement(applications, candidate), arm_placement(applications, baseline)
    if cand is None or base is None:
        return None
    return Placement(cand, base)
