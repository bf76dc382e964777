"""Stage the model into the model store (skips files whose checksum already matches).

With the ``raylift-staged-model`` alias among its ``outlets`` (``raylift.assets.staged_model_alias()``),
the task announces the staged model as an Asset event, which starts DAGs scheduled on the alias
(raylift_redeploy). raylift_deploy does not declare it: it deploys what it stages itself, and announcing
would make raylift_redeploy deploy the same model again (which would stage and announce it again).

Where the copy runs: on the ``ecs`` and ``eks`` targets (target option ``staging``, default ``remote``) an ECS task or
a Kubernetes Job beside the cluster copies the model (``raylift.targets.ecs_staging``, ``...eks_staging``), so no byte
of it passes through the Airflow worker's disk; the task defers while it runs (or waits in-process, ``deferrable=False``) and then
reads the record the copy wrote. ``staging: in_worker``, and the ``local`` and ``ray`` targets, copy in this task.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from raylift.config import default_deferrable
from raylift.operators.base import Stopwatch, TargetOperator
from raylift.records import StagedModel

# Extra time the defer timeout allows over the trigger's own timeout (the trigger reports first).
DEFER_MARGIN_S = 300
PENDING_KEY = "model_being_staged"


class StageModelOperator(TargetOperator):
    """Stage a model (hub, local path, file:// or s3://) into the target's model store under a
    content-addressed folder; the returned record tells the deploy where the weights are.

    :param model_source: a local path, ``file://``, ``s3://bucket/prefix``, an HTTPS tarball or a hub repo id.
    :param model_id: the model's name in the store; empty: named by its source
        (``raylift.staging.sources.model_id_from_source``: a hub repo id is its own name, else the last path segment).
    :param revision: hub revision or tag (None: the default branch; ``local`` for non-hub sources).
    :param allow_patterns: hub sources: only files matching these globs (None: all).
    :param ignore_patterns: hub sources: skip files matching these globs (None: duplicate weight formats).
    :param deferrable: where the target stages remotely (``ecs``/``eks``, ``staging: remote``), defer while the
        task/Job copies; default ``[operators] default_deferrable`` (as the provider's operators), read when the
        task is created. False: wait in this process on the same waiter."""

    template_fields = (
        *TargetOperator.template_fields, "model_source", "model_id", "revision", "allow_patterns", "ignore_patterns",
    )

    def __init__(
        self,
        *,
        model_source: str,
        model_id: str | None = None,
        revision: str | None = None,
        allow_patterns: list[str] | None = None,
        ignore_patterns: list[str] | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.deferrable = default_deferrable(deferrable)
        self.model_source = model_source
        self.model_id = model_id
        self.revision = revision
        self.allow_patterns, self.ignore_patterns = allow_patterns, ignore_patterns

    @property
    def store_name(self) -> str:
        """The ``model_id`` Param, or the source's own name when it is empty (a template renders null as None)."""
        from raylift.staging.sources import model_id_from_source

        if self.model_id in (None, "", "None"):
            return model_id_from_source(str(self.model_source))
        return str(self.model_id)

    def _patterns(self) -> dict[str, list[str]]:
        """The hub file filters that were given (a template renders null as None or "None")."""
        from raylift.errors import RayliftValueError

        given = {}
        for name in ("allow_patterns", "ignore_patterns"):
            value = getattr(self, name)
            if value in (None, "", "None"):
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise RayliftValueError(f"hub_{name} must be a list of glob strings, got {value!r}.")
            given[name] = value
        return given

    def execute(self, context: Any) -> dict[str, Any]:
        watch = Stopwatch()
        target: Any = self.target_impl
        if target.stages_remotely:
            return self._stage_remotely(context, target, watch)
        staged: StagedModel = target.stage_model(
            source=str(self.model_source), model_id=self.store_name, revision=self.revision or None,
            **self._patterns(),
        )
        return self._done(context, staged, watch)

    def _stage_remotely(self, context: Any, target: Any, watch: Stopwatch) -> dict[str, Any]:
        """Launch the copy beside the cluster; defer on its trigger, or wait here (``deferrable=False``)."""
        from raylift.targets.staging_request import request_id

        ti = context.get("ti")
        run_id = request_id(getattr(self, "dag_id", None) or "", context.get("run_id", ""), self.task_id,
                            getattr(ti, "try_number", None) or "", self.task_id)
        launch, trigger = target.start_staging(
            source=str(self.model_source), model_id=self.store_name, revision=self.revision or None,
            request_id=run_id, **self._patterns(),
        )
        # kept in XCom, not in the defer kwargs: `airflow dags test` resumes with the event alone
        ti.xcom_push(key=PENDING_KEY, value=launch.to_xcom())
        if not self.deferrable:
            self.log.info("staging %s on %s %s; waiting in-process", self.model_source, launch.runner, launch.handle)
            return self._done(context, target.finish_staging(launch, target.wait_for_staging(launch)), watch)
        self.log.info("staging %s on %s %s; deferring until it ends", self.model_source, launch.runner, launch.handle)
        timeout_s = getattr(trigger, "timeout_s", None)
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            timeout=timedelta(seconds=timeout_s + DEFER_MARGIN_S) if timeout_s else None,
        )

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        """Resume after the trigger's one event: read what the remote copy staged (StagingError with the task's or
        Job's exit code and reason when it failed)."""
        from raylift.aws.staging_job import StagingLaunch

        launch = StagingLaunch.from_xcom(context["ti"].xcom_pull(task_ids=self.task_id, key=PENDING_KEY))
        target: Any = self.target_impl
        return self._done(context, target.finish_staging(launch, event), None)

    def _done(self, context: Any, staged: StagedModel, watch: Stopwatch | None) -> dict[str, Any]:
        self.log.info(
            "staged %s@%s to %s: %s files copied (%s bytes), %s unchanged%s",
            staged.model_id,
            staged.revision,
            staged.uri,
            staged.copied_files,
            staged.copied_bytes,
            staged.skipped_files,
            f", in {watch}" if watch else "",
        )
        self._announce(context, staged)
        return staged.to_xcom()

    def _announce(self, context: Any, staged: StagedModel) -> None:
        """Add the staged model's Asset event to the staged-model alias, if this task declares it."""
        from raylift.assets import model_asset, staged_model_alias, staged_model_extra

        alias = staged_model_alias()
        if alias not in self.outlets:
            return
        asset = model_asset(staged)
        context["outlet_events"][alias].add(asset, extra=staged_model_extra(staged))
        self.log.info(
            "announced staged model %s@%s as asset %s (alias %s)", staged.model_id, staged.revision, asset.uri, alias.name
        )
