"""The one interface every deployment target implements (``local``, ``ecs``, ``eks``).

The DAG calls these methods through target-agnostic operators and never branches on the cloud.
Each method is one user-visible pipeline step; results are small JSON-able dataclasses so they can
travel through XCom (``to_xcom``/``from_xcom``) without leaking secrets.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger

T = TypeVar("T", bound="XcomRecord")


class XcomRecord:
    """Mixin: dataclass <-> plain dict for XCom."""

    def to_xcom(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_xcom(cls: type[T], data: dict[str, Any]) -> T:
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass(frozen=True)
class Artifact(XcomRecord):
    """What the cluster runs: the serve-app package (+ image on cloud targets), content-addressed."""

    digest: str  # sha256 of the inputs; the local analogue of an image tag
    working_dir: str  # runtime_env working_dir URI (local zip path, or s3:// zip)
    image: str | None = None  # container image URI (ecs/eks); None on local
    reused: bool = False  # True when an artifact with this digest already existed


@dataclass(frozen=True)
class StagedModel(XcomRecord):
    """A model copied into the model store, with the manifest that proves what is there."""

    model_id: str
    revision: str
    uri: str  # where the engine loads it from (local dir or s3:// prefix)
    manifest_uri: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # relpath -> {size, sha256}
    copied_files: int = 0
    skipped_files: int = 0
    copied_bytes: int = 0
    digest: str = ""  # content digest of ``files`` (raylift.staging.manifest.content_digest); names ``uri``


@dataclass(frozen=True)
class ClusterExpectation(XcomRecord):
    """What a scaled cluster must report before deploying: node count and minimum resources."""

    nodes: int
    resources: dict[str, float] = field(default_factory=dict)  # e.g. {"CPU": 3, "GPU": 12}


@dataclass(frozen=True)
class ClusterState(XcomRecord):
    """What the Ray cluster reports now (alive nodes and total resources)."""

    nodes: int
    resources: dict[str, float] = field(default_factory=dict)
    # Each alive node's resources, where the cluster reports them (the Ray dashboard does); empty
    # otherwise. Lets the deploy step check per-node fits (a TP group within one node).
    node_resources: list[dict[str, float]] = field(default_factory=list)

    def missing(self, want: ClusterExpectation) -> list[str]:
        """Human-readable shortfalls against ``want``; empty when the cluster is ready."""
        gaps = []
        if self.nodes < want.nodes:
            gaps.append(f"nodes {self.nodes}/{want.nodes}")
        for name, amount in sorted(want.resources.items()):
            have = self.resources.get(name, 0.0)
            if have + 1e-9 < amount:
                gaps.append(f"{name} {have:g}/{amount:g}")
        return gaps


class Target(ABC):
    """A place raylift deploys to. Subclasses register themselves by ``name``."""

    name: ClassVar[str]

    # -- build / stage -------------------------------------------------------------------------
    @abstractmethod
    def build_artifact(self, *, force: bool = False) -> Artifact:
        """Package serve_apps + runtime requirements; reuse an existing artifact with the same digest."""

    @abstractmethod
    def stage_model(
        self,
        *,
        source: str,
        model_id: str,
        revision: str | None = None,
        allow_patterns: list[str] | None = None,
        ignore_patterns: list[str] | None = None,
    ) -> StagedModel:
        """Copy the model from ``source`` into the model store; skip files whose checksum matches.
        ``allow_patterns``/``ignore_patterns`` filter hub downloads (None: skip duplicate weight formats)."""

    def start_build(self, *, force: bool = False) -> tuple[Artifact, BaseTrigger | None]:
        """Begin the build: the artifact, and a trigger to defer on while it is produced (None: ready now)."""
        return self.build_artifact(force=force), None

    def finish_build(self, artifact: Artifact) -> Artifact:
        """After a deferred build succeeded: what is left to do (e.g. re-point a moving image tag)."""
        return artifact

    # -- cluster -------------------------------------------------------------------------------
    @abstractmethod
    def scale(self, *, workers: int) -> ClusterExpectation:
        """Start or resize the Ray cluster to ``workers`` worker nodes (0 allowed); do not wait."""

    @abstractmethod
    def cluster_state(self) -> ClusterState:
        """Ask the running cluster what it has (raises ClusterError when it cannot be reached)."""

    def cluster_ready_trigger(self, want: ClusterExpectation) -> BaseTrigger | None:
        """A trigger for the slow first part of a scale (e.g. ECS tasks starting), or None to just poll."""
        return None

    def check_ready(self, want: ClusterExpectation) -> ClusterState:
        """What the cluster reports, or ClusterNotReadyError naming what is still missing."""
        from raylift.errors import ClusterNotReadyError

        state = self.cluster_state()
        gaps = state.missing(want)
        if gaps:
            raise ClusterNotReadyError(f"The Ray cluster is missing {', '.join(gaps)}.")
        return state

    def billed_nodes(self) -> dict[str, int]:
        """Instance type -> count of the nodes this target's Ray cluster runs now (what is billed per hour).
        Empty when the target cannot tell; the benchmark then reports no cost rather than a wrong one."""
        return {}

    # -- serve ---------------------------------------------------------------------------------
    @abstractmethod
    def current_serve_config(self) -> dict[str, Any]:
        """The Serve config currently applied (``{"applications": [...], ...}``); empty apps if none."""

    @abstractmethod
    def apply_serve_config(self, config: dict[str, Any]) -> None:
        """Apply a whole Serve config (the caller has merged it with what is running)."""

    @abstractmethod
    def deploy_trigger(self, *, app_names: list[str], timeout_s: float) -> BaseTrigger:
        """A trigger that fires when ``app_names`` are RUNNING, or with Serve's error when one fails."""

    @abstractmethod
    def endpoint_url(self) -> str:
        """Base URL of the OpenAI-compatible endpoint (without ``/v1``)."""

    @abstractmethod
    def teardown(self) -> None:
        """Scale to zero and stop what ``scale`` started. Idempotent."""

    # -- shared, overridable ---------------------------------------------------------------------
    def serve_cluster_options(self) -> dict[str, Any]:
        """Serve's cluster-wide options (``http_options``, ``proxy_location``) this target decides
        for a cluster's first config; what it leaves out comes from the app's config file."""
        return {}

    def publish_benchmark(self, result: dict[str, Any], *, model: str, run_id: str) -> list[str]:
        """Send a benchmark's figures where this target's dashboard reads them; returns the metric names sent.
        Nothing here (local: the run record and report are the dashboard); AWS targets publish to CloudWatch."""
        return []

    def ensure_app_runtime(self, module: str, app_kind: str) -> None:
        """Make sure the cluster's runtime can import ``module``, which only the ``app_kind`` app needs.
        The images built for AWS targets carry every app's packages, so nothing to do here."""

    def validate_engine_args(self, model_path: str, engine_args: dict[str, Any], *,
                             working_dir: str | None = None) -> None:
        """Refuse engine args vLLM would reject, before deploying (``working_dir``: the app's package, for a
        target that runs the check on the cluster). Targets without a local vLLM runtime rely on Serve
        reporting DEPLOY_FAILED (and the deploy rolling back) instead."""

    def state_uri(self) -> str:
        """Where run records and the last good Serve config are kept (the model store by default)."""
        return self.model_store_uri()

    @abstractmethod
    def model_store_uri(self) -> str:
        """Root URI of the model store (a local directory or an ``s3://`` prefix)."""
