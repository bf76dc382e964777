"""The small records raylift's steps hand each other through XCom (a leaf module: it imports nothing of raylift).

Each is a frozen dataclass that becomes a plain dict (``to_xcom``) and back (``from_xcom``), so a record
crosses task boundaries as JSON and never carries a client, a hook or a secret.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

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
    digest: str = ""  # content digest of ``files`` (raylift.manifest.content_digest); names ``uri``


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
