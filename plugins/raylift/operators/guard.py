"""The one rollback step: after any failure past the deploy, or a release the gate or a person rejected.

Deploy, smoke test, benchmark, gate, approval and promote each fail in their own ways (a rejected release,
Serve's DEPLOY_FAILED, but also a benchmark exception, a non-JSON answer, a store write error, a deferral
timeout after a triggerer restart, a worker that died after the PUT). This task runs when any of them failed
(trigger rule ``one_failed``) and undoes the release (``raylift.release.rollback.undo_release``): it removes the canary
(and gives back a replica it borrowed), and restores the app if this run's unproven config still serves it.

A release that lost its lease (a worker lost past ``RELEASE_LEASE_TTL_S``) must still be undone: its canary, or an
unproven direct config, would otherwise stay up. So the rollback, being the same run, takes the lease again when it
is free (and says the release lost it); when another run holds it, it leaves a **hold** record in the state store
(``DeploymentState.save_hold``: who holds the lease, which app, what is left up, what to run) and fails with the
same message (``RollbackHeldError``).
"""

from __future__ import annotations

from typing import Any

from raylift.config import DEFAULT_APP_NAME
from raylift.lease import LeaseLostError
from raylift.operators.base import TargetOperator, release_holder


class RollbackHeldError(LeaseLostError):
    """The rollback could not take the cluster's lease back (another run holds it): nothing was undone, and a
    hold record in the state store names what is left up and what to run."""


class RollbackUnprovenOperator(TargetOperator):
    """Runs when a step past the deploy failed (``one_failed``): removes this run's canary, and restores the
    app if this run's unproven config is still the one serving.

    :param app_name: the Serve application this run deployed."""

    template_fields = (*TargetOperator.template_fields, "app_name")

    def __init__(self, *, app_name: str = DEFAULT_APP_NAME, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "one_failed")
        super().__init__(**kwargs)
        self.app_name = app_name
        self.lease_note: str | None = None

    def renew_release_lease(self, context: Any) -> None:
        """The release's lease, or, if it was lost, the lease taken again as this run (when free); a hold record
        and RollbackHeldError when another run holds it."""
        from raylift.config import RELEASE_LEASE_TTL_S
        from raylift.lease import LeaseBusyError
        from raylift.release.writer import cluster_lease

        try:
            super().renew_release_lease(context)
            return
        except LeaseLostError as exc:
            lost = exc
        manager = cluster_lease(self.target_impl)
        try:
            lease = manager.try_acquire(release_holder(context), RELEASE_LEASE_TTL_S)
        except LeaseBusyError:
            raise self._leave_hold(context, lost, manager.current()) from None
        self.lease_note = (f"this release lost its writer lease ({lost}); the rollback took it again as the same run "
                           f"(token {lease.token})")
        self.log.warning("%s", self.lease_note)
        self.target_impl.held_lease = lease
        from contextlib import ExitStack

        self._keeping = ExitStack()
        self._keeping.enter_context(manager.keep(lease, RELEASE_LEASE_TTL_S, release=False))

    def _leave_hold(self, context: Any, lost: LeaseLostError, current: Any) -> RollbackHeldError:
        run_id, app = str(context["run_id"]), str(self.app_name)
        state = self.state_for(app)
        left_up: list[str] = []
        canary = state.canary(run_id)
        if canary is not None and not state.proven(run_id):
            left_up.append(f"the canary app {(canary.get('canary') or {}).get('name')!r}")
        if state.applied(run_id) is not None and not state.proven(run_id):
            left_up.append(f"run {run_id}'s unproven config of app {app!r}, if it still serves")
        holder = current.holder if current is not None else "another writer"
        to_run = (f"when {holder}'s release ends, run this rollback again as run {run_id}: clear its 'rollback' task "
                  "(the UI's Clear on that task, or POST /api/v2/dags/raylift_deploy/clearTaskInstances with "
                  f'{{"dag_run_id": "{run_id}", "task_ids": ["{self.task_id}"]}}); or undo it by hand')
        message = (f"Run {run_id} cannot roll back app {app!r} on cluster {self.target_impl.cluster_key()}: it no "
                   f"longer holds the writer lease, now held by {holder} ({lost}). Left up: "
                   f"{'; '.join(left_up) or 'nothing this run recorded'}. Nothing was undone; {to_run}.")
        state.save_hold(run_id, {"run_id": run_id, "holder": holder, "app": app, "left_up": left_up,
                                 "to_run": to_run, "message": message})
        self.log.error("%s", message)
        return RollbackHeldError(message)

    def execute(self, context: Any) -> str:
        from raylift.release.rollback import undo_release

        state = self.state_for(str(self.app_name))
        action = undo_release(self.target_impl, state, context["run_id"], str(self.app_name))
        if self.lease_note:
            action = f"{self.lease_note}; {action}"
        state.clear_hold(context["run_id"])
        self.log.warning("release undone: %s", action)
        return action
