"""Scale the Ray cluster up/down, and tear it down."""

from __future__ import annotations

from typing import Any

from raylift.errors import RayliftValueError
from raylift.operators.base import Stopwatch, TargetOperator


class ScaleClusterOperator(TargetOperator):
    """Start or resize the cluster to ``workers`` worker nodes; the sensor after it waits for them."""

    template_fields = (*TargetOperator.template_fields, "workers")

    def __init__(self, *, workers: int | str = 0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.workers = workers

    def execute(self, context: Any) -> dict[str, Any]:
        try:
            workers = int(self.workers)
        except (TypeError, ValueError):
            raise RayliftValueError(f"'workers' must be an integer >= 0, got {self.workers!r}.") from None
        if workers < 0:
            raise RayliftValueError(f"'workers' must be >= 0, got {workers}.")
        watch = Stopwatch()
        want = self.target_impl.scale(workers=workers)
        self.log.info("cluster scaled to %s worker(s) in %s; expecting %s", workers, watch, want)
        return want.to_xcom()


class TeardownOperator(TargetOperator):
    """Scale to zero and stop what raylift started. Idempotent."""

    def execute(self, context: Any) -> None:
        watch = Stopwatch()
        self.target_impl.teardown()
        self.log.info("target %s torn down in %s", self.target, watch)
