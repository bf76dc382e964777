"""Wait until the Ray cluster reports the nodes and resources the scale step asked for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk.bases.sensor import BaseSensorOperator

from raylift.errors import ClusterError, ClusterNotReadyError
from raylift.targets.base import ClusterExpectation


class RayClusterReadySensor(BaseSensorOperator):
    """Pokes ``target.cluster_state()``; on timeout the error names what is still missing."""

    template_fields: Sequence[str] = ("target", "target_options", "expectation")

    def __init__(
        self, *, expectation: Any, target: str = "local", target_options: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        kwargs.setdefault("poke_interval", 3)
        kwargs.setdefault("timeout", 300)
        super().__init__(**kwargs)
        self.target = target
        self.target_options = target_options or {}
        self.expectation = expectation
        self._last_gaps: list[str] = []

    def poke(self, context: Any) -> bool:
        from raylift.targets import get_target

        want = ClusterExpectation.from_xcom(self.expectation)
        try:
            state = get_target(self.target, **self.target_options).cluster_state()
        except ClusterError as exc:
            self._last_gaps = [str(exc)]
            self.log.info("cluster not reachable yet: %s", exc)
            return False
        self._last_gaps = state.missing(want)
        self.log.info("cluster has %s node(s) %s; missing: %s", state.nodes, state.resources, self._last_gaps or "nothing")
        return not self._last_gaps

    def execute(self, context: Any) -> Any:
        try:
            return super().execute(context)
        except Exception as exc:
            if "Sensor has timed out" in str(exc) or type(exc).__name__ == "AirflowSensorTimeout":
                raise ClusterNotReadyError(
                    f"The Ray cluster did not become ready in {self.timeout}s; still missing: "
                    f"{', '.join(self._last_gaps) or 'unknown'}. Check the worker logs / capacity."
                ) from exc
            raise
