"""The one rollback step: after any failure past the deploy, or a release the gate or a person rejected.

Deploy, smoke test, benchmark, gate, approval and promote each fail in their own ways (a rejected release,
Serve's DEPLOY_FAILED, but also a benchmark exception, a non-JSON answer, a store write error, a deferral
timeout after a triggerer restart, a worker that died after the PUT). This task runs when any of them failed
(trigger rule ``one_failed``) and undoes the release (``raylift.rollback.undo_release``): it removes the canary
(and gives back a replica it borrowed), and restores the app if this run's unproven config still serves it.
"""

from __future__ import annotations

from typing import Any

from raylift.config import DEFAULT_APP_NAME
from raylift.operators.base import TargetOperator


class RollbackUnprovenOperator(TargetOperator):
    """Runs when a step past the deploy failed (``one_failed``): removes this run's canary, and restores the
    app if this run's unproven config is still the one serving.

    :param app_name: the Serve application this run deployed."""

    template_fields = (*TargetOperator.template_fields, "app_name")

    def __init__(self, *, app_name: str = DEFAULT_APP_NAME, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "one_failed")
        super().__init__(**kwargs)
        self.app_name = app_name

    def execute(self, context: Any) -> str:
        from raylift.rollback import undo_release

        action = undo_release(
            self.target_impl, self.state_for(str(self.app_name)), context["run_id"], str(self.app_name)
        )
        self.log.warning("release undone: %s", action)
        return action
