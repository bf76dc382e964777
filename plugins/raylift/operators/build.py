"""Build (or reuse) the runtime artifact: serve-app package locally, container image on AWS."""

from __future__ import annotations

from typing import Any

from raylift.operators.base import Stopwatch, TargetOperator


class BuildArtifactOperator(TargetOperator):
    """Content-addressed build: an unchanged tree reuses the artifact it already has."""

    template_fields = (*TargetOperator.template_fields, "force")

    def __init__(self, *, force: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.force = force

    def execute(self, context: Any) -> dict[str, Any]:
        watch = Stopwatch()
        artifact = self.target_impl.build_artifact(force=bool(self.force))
        self.log.info(
            "artifact %s %s (%s) in %s",
            artifact.digest[:12],
            "reused" if artifact.reused else "built",
            artifact.image or artifact.working_dir,
            watch,
        )
        return artifact.to_xcom()
