"""Content-addressed image inputs: one sha256 over the files that make the Ray + vLLM image.

The digest names the ECR image tag, so an unchanged input set is never built twice (the serve-app
zip has its own digest, from ``raylift.artifact``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from raylift.config import SERVE_APPS_DIR_NAME
from raylift.errors import BuildError

RUNTIME_LOCK = "requirements/runtime.lock"
IMAGE_TAG_LENGTH = 20
_SKIP_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def _wanted(path: Path, root: Path) -> bool:
    rel = path.relative_to(root)
    return path.is_file() and not _SKIP_PARTS.intersection(rel.parts) and not path.name.endswith(_SKIP_SUFFIXES)


def collect_files(root: Path, entries: Iterable[str]) -> list[str]:
    """Relative POSIX paths of every file named by ``entries`` (files, or folders walked recursively)."""
    found: set[str] = set()
    for entry in entries:
        path = root / entry
        if path.is_file():
            found.add(Path(entry).as_posix())
        elif path.is_dir():
            found.update(p.relative_to(root).as_posix() for p in path.rglob("*") if _wanted(p, root))
        else:
            raise BuildError(f"Build input {entry!r} is missing under {root}: restore it or fix the image name.")
    return sorted(found)


def content_digest(root: Path, relpaths: Iterable[str]) -> str:
    """sha256 over sorted (relative path, bytes) pairs; renames change it as well as edits."""
    digest = hashlib.sha256()
    for rel in sorted(relpaths):
        data = (root / rel).read_bytes()
        digest.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0")
        digest.update(data)
    return digest.hexdigest()


def image_inputs(image_name: str) -> list[str]:
    """What goes into the image: its Dockerfile, the runtime lock file and the serve apps."""
    return [f"images/{image_name}/Dockerfile", RUNTIME_LOCK, SERVE_APPS_DIR_NAME]


def image_content_digest(root: Path, image_name: str) -> str:
    return content_digest(root, collect_files(root, image_inputs(image_name)))


def image_tag(digest: str) -> str:
    """The ECR tag for a content digest (a prefix is plenty to be unique in one repository)."""
    return digest[:IMAGE_TAG_LENGTH]
