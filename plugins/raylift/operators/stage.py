"""Stage the model into the model store (skips files whose checksum already matches)."""

from __future__ import annotations

from typing import Any

from raylift.operators.base import Stopwatch, TargetOperator


class StageModelOperator(TargetOperator):
    template_fields = (*TargetOperator.template_fields, "model_source", "model_id", "revision")

    def __init__(self, *, model_source: str, model_id: str, revision: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.model_source = model_source
        self.model_id = model_id
        self.revision = revision

    def execute(self, context: Any) -> dict[str, Any]:
        watch = Stopwatch()
        staged = self.target_impl.stage_model(
            source=str(self.model_source), model_id=str(self.model_id), revision=self.revision or None
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
        return staged.to_xcom()
