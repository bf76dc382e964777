"""The staging manifest: relative path -> size and sha256, so re-runs copy only what changed.

One module for both sides: raylift's staging writes manifests with it, and the LLM serve app reads them with
it on the replica (``serve_apps/llm/manifest.py`` is a link to this file, so the serve-app package carries it).
Hence the standard library only, and nothing imported from raylift.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAME = "raylift-manifest.json"
_CHUNK = 4 * 1024 * 1024


class UnsafeManifestPath(ValueError):
    """A manifest entry that would land outside the model's folder."""


def safe_rel(rel: str) -> str:
    """A manifest path as a relative POSIX path inside the model folder; refuse anything that escapes it."""
    norm = posixpath.normpath(rel) if rel else ""
    if not rel or rel.startswith("/") or "\\" in rel or "\x00" in rel or norm in (".", "..") or norm.startswith("../"):
        raise UnsafeManifestPath(f"Refusing model file {rel!r}: it would escape the model's folder.")
    return norm


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_entry(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def content_digest(files: dict[str, dict[str, Any]]) -> str:
    """sha256 over every file's path, size and sha256: the model's identity, whatever it is called.

    It names the model's folder in the store (``<model>/<revision>/sha256-<digest[:16]>``), so different
    weights always land in a new folder, which changes the Serve app's args and restarts its replicas.
    """
    canonical = {rel: {"sha256": e["sha256"], "size": int(e["size"])} for rel, e in sorted(files.items())}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass
class Manifest:
    """What a staged model folder holds; stored beside the files as ``raylift-manifest.json``."""

    model_id: str
    revision: str
    source: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return content_digest(self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id, "revision": self.revision, "source": self.source, "files": self.files,
            "digest": self.digest,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        return cls(data["model_id"], data["revision"], data.get("source", ""), dict(data.get("files", {})))

    @property
    def total_bytes(self) -> int:
        return sum(int(e["size"]) for e in self.files.values())
