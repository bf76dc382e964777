"""Stage the model into the model store (skips files whose checksum already matches).

With the ``raylift-staged-model`` alias among its ``outlets`` (``raylift.assets.staged_model_alias()``),
the task announces the staged model as an Asset event, which starts DAGs scheduled on the alias
(raylift_redeploy). raylift_deploy does not declare it: it deploys what it stages itself, and announcing
would make raylift_redeploy deploy the same model again (which would stage and announce it again).
"""

from __future__ import annotations

from typing import Any

from raylift.operators.base import Stopwatch, TargetOperator
from raylift.records import StagedModel


class StageModelOperator(TargetOperator):
    """Stage a model (hub, local path, file:// or s3://) into the target's model store under a
    content-addressed folder; the returned record tells the deploy where the weights are.

    :param model_source: a local path, ``file://``, ``s3://bucket/prefix``, an HTTPS tarball or a hub repo id.
    :param model_id: the model's name in the store.
    :param revision: hub revision or tag (None: the default branch; ``local`` for non-hub sources).
    :param allow_patterns: hub sources: only files matching these globs (None: all).
    :param ignore_patterns: hub sources: skip files matching these globs (None: duplicate weight formats)."""

    template_fields = (
        *TargetOperator.template_fields, "model_source", "model_id", "revision", "allow_patterns", "ignore_patterns",
    )

    def __init__(
        self,
        *,
        model_source: str,
        model_id: str,
        revision: str | None = None,
        allow_patterns: list[str] | None = None,
        ignore_patterns: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.model_source = model_source
        self.model_id = model_id
        self.revision = revision
        self.allow_patterns, self.ignore_patterns = allow_patterns, ignore_patterns

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
        staged: StagedModel = self.target_impl.stage_model(
            source=str(self.model_source), model_id=str(self.model_id), revision=self.revision or None,
            **self._patterns(),
        )
        self.log.info(
            "staged %s@%s to %s: %s files copied (%s bytes), %s unchanged, in %s",
            staged.model_id,
            staged.revision,
            staged.uri,
            staged.copied_files,
            staged.copied_bytes,
            staged.skipped_files,
            watch,
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
