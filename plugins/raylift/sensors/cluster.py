"""Wait until the Ray cluster reports the nodes and resources the scale step asked for."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import Any

from airflow.sdk.bases.sensor import BaseSensorOperator

from raylift.errors import ClusterError, ClusterNotReadyError
from raylift.records import ClusterExpectation
from raylift.targets.base import Target

DEFER_MARGIN_S = 120


class RayClusterReadySensor(BaseSensorOperator):
    """Two stages: defer on the target's trigger for the slow part of a scale when it has one (ECS tasks
    starting), then poke ``target.check_ready()`` until Ray itself reports the nodes and resources.
    On timeout the error names what is still missing.

    :param expectation: the scale step's ``ClusterExpectation`` (its XCom): the nodes and resources to wait for.
    :param target: the target's name (``local``, ``ray``, ``ecs``, ``eks``).
    :param target_options: the target's own options.
    :param cluster_conn_id: the cluster's ``raylift_cluster`` connection (see ``TargetOperator``).
    :param deferrable: defer on the target's scale trigger (ECS) while tasks start; False pokes from the start.
        None takes Airflow's ``[operators] default_deferrable`` (raylift's own runs set it True).
    """

    template_fields: Sequence[str] = ("target", "target_options", "cluster_conn_id", "expectation")

    def __init__(
        self,
        *,
        expectation: Any,
        target: str = "local",
        target_options: dict[str, Any] | None = None,
        cluster_conn_id: str | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        from raylift.config import default_deferrable

        # 1 s: a poke is one dashboard read, and on a first deploy the head's node is usually listed a second
        # after the first poke; at 3 s that wait was 3.1 s of every fresh cluster's cold start (bench/README.md)
        kwargs.setdefault("poke_interval", 1)
        kwargs.setdefault("timeout", 300)
        super().__init__(**kwargs)
        self.target = target
        self.target_options = target_options or {}
        self.cluster_conn_id = cluster_conn_id
        self.expectation = expectation
        self.deferrable = default_deferrable(deferrable)
        self._last_gaps: list[str] = []

    @cached_property
    def target_impl(self) -> Target:
        from raylift.targets import resolve_target

        return resolve_target(self.target, self.target_options, self.cluster_conn_id or None)

    def poke(self, context: Any) -> bool:
        want = ClusterExpectation.from_xcom(self.expectation)
        try:
            state = self.target_impl.check_ready(want)
        except ClusterNotReadyError as exc:
            self._last_gaps = [str(exc)]
            self.log.info("cluster not ready yet: %s", exc)
            return False
        except ClusterError as exc:
            self._last_gaps = [str(exc)]
            self.log.info("cluster not reachable yet: %s", exc)
            return False
        self._last_gaps = []
        self.log.info("cluster has %s node(s) %s: ready", state.nodes, state.resources)
        return True

    def execute(self, context: Any) -> Any:
        trigger = self.target_impl.cluster_ready_trigger(ClusterExpectation.from_xcom(self.expectation))
        if trigger is not None and self.deferrable:
            timeout_s = getattr(trigger, "timeout_s", None)
            self.defer(
                trigger=trigger,
                method_name="execute_complete",
                timeout=timedelta(seconds=timeout_s + DEFER_MARGIN_S) if timeout_s else None,
            )
        return self._poke_until_ready(context)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("status") != "success":
            raise ClusterNotReadyError(event.get("message") or f"The cluster did not scale: {event}")
        self.log.info("scaled: %s; now waiting for Ray to report the nodes", event.get("services") or event)
        return self._poke_until_ready(context)

    def _poke_until_ready(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except Exception as exc:
            if "Sensor has timed out" in str(exc) or type(exc).__name__ == "AirflowSensorTimeout":
                raise ClusterNotReadyError(
                    f"The Ray cluster did not become ready in {self.timeout}s; still missing: "
                    f"{', '.join(self._last_gaps) or 'unknown'}. Check the worker logs / capacity."
                ) from exc
            raise
