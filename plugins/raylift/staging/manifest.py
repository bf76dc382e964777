"""The staging manifest: relative path -> size and sha256, so re-runs copy only what changed."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAME = "raylift-manifest.json"
_CHUNK = 4 * 1024 * 1024


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


@dataclass
class Manifest:
    """What a staged model folder holds; stored beside the files as ``raylift-manifest.json``."""

    model_id: str
    revision: str
    source: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "revision": self.revision, "source": self.source, "files": self.files}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        return cls(data["model_id"], data["revision"], data.get("source", ""), dict(data.get("files", {})))

    @property
    def total_bytes(self) -> int:
        return sum(int(e["size"]) for e in self.files.values())
