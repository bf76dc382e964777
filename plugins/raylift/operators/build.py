"""Build (or reuse) the runtime artifact: serve-app package locally, container image on AWS."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from raylift.config import default_deferrable
from raylift.errors import BuildError
from raylift.operators.base import Stopwatch, TargetOperator
from raylift.records import Artifact

# Extra time the defer timeout allows over the trigger's own timeout (the trigger reports first).
DEFER_MARGIN_S = 300
PENDING_KEY = "artifact_being_built"


class BuildArtifactOperator(TargetOperator):
    """Content-addressed build: an unchanged tree reuses the artifact it already has.

    When the target builds remotely (CodeBuild on AWS), a deferrable task defers on the target's build
    trigger instead of holding a worker slot; otherwise it waits in-process on the same waiter. Either way
    it fails with the failing phase, reason and logs link.

    :param force: build even when the artifact for this content exists.
    :param deferrable: defer while the build runs; default ``[operators] default_deferrable`` (as the
        provider's operators), read when the task is created.
    """

    template_fields = (*TargetOperator.template_fields, "force")

    def __init__(self, *, force: bool = False, deferrable: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.force = force
        self.deferrable = default_deferrable(deferrable)

    def execute(self, context: Any) -> dict[str, Any]:
        watch = Stopwatch()
        target = self.target_impl
        if not self.deferrable:
            return self._done(target.build_artifact(force=bool(self.force)), watch)
        artifact, trigger = target.start_build(force=bool(self.force))
        if trigger is None:
            return self._done(artifact, watch)
        self.log.info("building image %s; deferring until the build ends", artifact.image)
        # kept in XCom, not in the defer kwargs: `airflow dags test` resumes with the event alone
        context["ti"].xcom_push(key=PENDING_KEY, value=artifact.to_xcom())
        timeout_s = getattr(trigger, "timeout_s", None)
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            timeout=timedelta(seconds=timeout_s + DEFER_MARGIN_S) if timeout_s else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger's one event: ``success``, or ``failed``/``timeout`` with a message."""
        if event.get("status") != "success":
            raise BuildError(event.get("message") or f"The image build ended {event.get('status')}: {event}")
        self.log.info("build %s succeeded (logs: %s)", event.get("build_id"), event.get("logs_url"))
        artifact = Artifact.from_xcom(context["ti"].xcom_pull(task_ids=self.task_id, key=PENDING_KEY))
        return self._done(self.target_impl.finish_build(artifact), None)

    def _done(self, artifact: Artifact, watch: Stopwatch | None) -> dict[str, Any]:
        self.log.info(
            "artifact %s %s (%s)%s",
            artifact.digest[:12],
            "reused" if artifact.reused else "built",
            artifact.image or artifact.working_dir,
            f" in {watch}" if watch else "",
        )
        return artifact.to_xcom()
