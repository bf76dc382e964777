"""Shared plumbing for operators that act on a deployment target chosen by Param."""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

from raylift.targets.base import Target


class TargetOperator(BaseOperator):
    """An operator that works through ``get_target(target, **target_options)``.

    ``target`` and ``target_options`` are templated, so a DAG passes ``{{ params.target }}``; the
    operator never branches on which cloud it is.

    :param target: the target's name (``local``, ``ray``, ``ecs``, ``eks``; see ``raylift.targets.TARGETS``).
    :param target_options: the target's own options (e.g. ECS cluster and services, an EKS cluster name);
        an option the target does not know is refused with the list it takes.
    """

    template_fields: Sequence[str] = ("target", "target_options")

    def __init__(self, *, target: str = "local", target_options: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.target = target
        self.target_options = target_options or {}

    @cached_property
    def target_impl(self) -> Target:
        from raylift.targets import get_target

        return get_target(self.target, **(self.target_options or {}))

    def state_for(self, app_name: str) -> Any:
        from raylift.deploy_state import DeploymentState
        from raylift.store import open_store

        store = open_store(self.target_impl.state_uri(), aws_conn_id=self.target_options.get("aws_conn_id"))
        return DeploymentState(store, self.target_impl.name, app_name)


class Stopwatch:
    """Elapsed-time helper for progress lines ("... 12.3s")."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    def __str__(self) -> str:
        return f"{time.monotonic() - self.t0:.1f}s"
