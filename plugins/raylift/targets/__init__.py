"""Deployment targets behind one interface; ``get_target(name, **options)`` picks one by name."""

from __future__ import annotations

import importlib
from typing import Any

from raylift.errors import UnknownTargetError
from raylift.targets.base import Target

# name -> "module:Class"; imported lazily so the DAG parser never imports boto3/kubernetes.
TARGETS: dict[str, str] = {
    "local": "raylift.targets.local:LocalTarget",
    "ecs": "raylift.targets.ecs:EcsTarget",
    "eks": "raylift.targets.eks:EksTarget",
    "ray": "raylift.targets.ray_cluster:RayClusterTarget",
}


def get_target(name: str, **options: Any) -> Target:
    """Instantiate the target called ``name`` with its target-specific ``options``."""
    try:
        path = TARGETS[name]
    except KeyError:
        raise UnknownTargetError(
            f"Unknown target {name!r}: set the 'target' param to one of {sorted(TARGETS)}."
        ) from None
    module, cls = path.split(":")
    return getattr(importlib.import_module(module), cls)(**options)


__all__ = ["TARGETS", "Target", "get_target"]
