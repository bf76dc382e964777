"""Content-addressed image inputs: one sha256 over the files that make the Ray + vLLM image.

The digest names the ECR image tag, so an unchanged input set is never built twice (the serve-app
zip has its own digest, from ``raylift.artifact``). The same files, zipped deterministically, are the
build context CodeBuild reads from S3 (``<prefix>/<digest>.zip``): the buildspec, the Dockerfile and its
``.dockerignore``, everything the Dockerfile COPYs, the runtime lock and the serve apps.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from raylift.config import SERVE_APPS_DIR_NAME
from raylift.errors import BuildError

RUNTIME_LOCK = "requirements/runtime.lock"
BUILDSPEC = "images/buildspec.yml"  # the CodeBuild project's buildspec path (terraform image_pipeline)
ARM64 = "linux/arm64"
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
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


def _instructions(text: str) -> list[tuple[str, list[str]]]:
    """(KEYWORD, shell-split args) per Dockerfile instruction, continuations joined, comments dropped."""
    joined = re.sub(r"\\\n(?:[ \t]*#[^\n]*\n)*", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), shlex.split(rest, comments=False)))
    return found


def copy_sources(dockerfile_text: str) -> list[str]:
    """Context paths the Dockerfile's COPY/ADD read (not ``--from`` stages, not URLs)."""
    sources: list[str] = []
    for keyword, args in _instructions(dockerfile_text):
        if keyword not in ("COPY", "ADD"):
            continue
        if any(a.startswith("--from") for a in args):
            continue
        paths = [a for a in args if not a.startswith("--")]
        sources.extend(s.lstrip("./") or "." for s in paths[:-1] if "://" not in s)
    return sources


def image_platform(root: Path, image_name: str) -> str | None:
    """``linux/arm64`` when the image's base is an arm64 one (e.g. ``...-aarch64``), else None (the builder's)."""
    text = (root / f"images/{image_name}/Dockerfile").read_text()
    bases = [args[0] for keyword, args in _instructions(text) if keyword == "FROM" and args]
    return ARM64 if any(re.search(r"aarch64|arm64", b) for b in bases) else None


def build_context_files(root: Path, image_name: str) -> list[str]:
    """Every file the build of ``image_name`` reads from its context (and the buildspec, when the checkout has it)."""
    entries = image_inputs(image_name)
    dockerfile = root / entries[0]
    if dockerfile.is_file():
        entries += copy_sources(dockerfile.read_text())
    entries += [e for e in (BUILDSPEC, f"{entries[0]}.dockerignore") if (root / e).is_file()]
    found: set[str] = set()
    for entry in entries:
        matches = sorted(root.glob(entry)) if any(c in entry for c in "*?[") else [root / entry]
        for match in matches or [root / entry]:
            found.update(collect_files(root, [match.relative_to(root).as_posix()]))
    return sorted(found)


def image_content_digest(root: Path, image_name: str) -> str:
    return content_digest(root, build_context_files(root, image_name))


def build_context_zip(root: Path, image_name: str, out_dir: Path) -> tuple[Path, str]:
    """The build context as a deterministic zip ``<digest>.zip`` (fixed times, sorted); (path, digest)."""
    files = build_context_files(root, image_name)
    digest = content_digest(root, files)
    path = out_dir / f"{digest}.zip"
    if not path.is_file():
        out_dir.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for rel in files:
                info = zipfile.ZipInfo(rel, date_time=_ZIP_TIME)
                info.external_attr = ((root / rel).stat().st_mode & 0o777 | 0o100000) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, (root / rel).read_bytes())
        partial.replace(path)
    return path, digest


def upload_build_context(s3: Any, root: Path, image_name: str, *, bucket: str, prefix: str, cache_dir: Path) -> str:
    """Put the build context at ``s3://<bucket>/<prefix>/<digest>.zip`` (once: the key is its content) and return
    ``<bucket>/<key>``, the form CodeBuild's S3 source location takes."""
    from botocore.exceptions import ClientError

    path, digest = build_context_zip(root, image_name, cache_dir)
    key = f"{prefix.strip('/')}/{digest}.zip"
    try:
        s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("404", "NoSuchKey", "NotFound"):
            raise
        s3.upload_file(str(path), bucket, key)
    return f"{bucket}/{key}"


def image_tag(digest: str) -> str:
    """The ECR tag for a content digest (a prefix is plenty to be unique in one repository)."""
    return digest[:IMAGE_TAG_LENGTH]
