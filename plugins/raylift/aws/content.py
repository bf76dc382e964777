"""Content-addressed image inputs: one sha256 over exactly the files an image's build reads.

The digest names the ECR image tag, so an unchanged input set is never built twice (the serve-app
zip has its own digest, from ``raylift.artifact``). The same files, zipped deterministically, are the
build context CodeBuild reads from S3 (``<prefix>/<digest>.zip``): the buildspec, the Dockerfile and its
``.dockerignore``, and what the Dockerfile COPYs/ADDs as BuildKit sends it (its sources, less what the
ignore file excludes). All of it is read off the Dockerfile and the ignore file; nothing else is added,
so an edit the image cannot see (a Serve config, a test) leaves the tag, and the cluster, alone.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
import shlex
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from raylift.errors import BuildError

RUNTIME_LOCK = "requirements/runtime.lock"  # what the serve-app zip carries beside serve_apps/ (raylift.artifact)
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


def dockerfile_path(image_name: str) -> str:
    return f"images/{image_name}/Dockerfile"


def _dockerignore_regex(pattern: str) -> re.Pattern[str]:
    """One .dockerignore pattern as Docker compiles it (moby's patternmatcher): Go's ``filepath.Match`` per path
    element (``*`` and ``?`` never cross a ``/``, ``[...]`` a character class), ``**`` any number of elements."""
    out, i, in_class = "", 0, False
    while i < len(pattern):
        ch = pattern[i]
        if in_class:
            out += ch
            in_class = ch != "]"
        elif ch == "[":
            out, in_class = out + ch, True
        elif ch == "*" and pattern[i + 1 : i + 2] == "*":
            i += 2 if pattern[i + 2 : i + 3] != "/" else 3
            out += ".*" if i >= len(pattern) else "(.*/)?"
            continue
        elif ch == "*":
            out += "[^/]*"
        elif ch == "?":
            out += "[^/]"
        elif ch == "\\" and i + 1 < len(pattern):
            i += 1
            out += re.escape(pattern[i])
        else:
            out += re.escape(ch)
        i += 1
    return re.compile(f"^{out}$")


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """(is an exception ``!...``, compiled pattern) per line of a .dockerignore, comments and blanks dropped."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        body = posixpath.normpath(line[1:].strip() if negate else line).lstrip("/")
        rules.append((negate, _dockerignore_regex(body)))
    return rules


def dockerignore_excludes(text: str | list[tuple[bool, re.Pattern[str]]], path: str) -> bool:
    """Whether BuildKit leaves ``path`` (relative to the context) out: the last pattern that matches it or one of
    its parent folders decides, an exception (``!``) re-including it (Docker's ``MatchesOrParentMatches``)."""
    rules = dockerignore_rules(text) if isinstance(text, str) else text
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negate, regex in rules:
        if regex.match(path) or any(regex.match(c) for c in candidates[:-1]):
            excluded = not negate
    return excluded


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
        # context-relative (a leading / is the context's root); not URLs, not heredocs (COPY <<EOF)
        sources.extend(posixpath.normpath(s).lstrip("/") or "." for s in paths[:-1]
                       if "://" not in s and not s.startswith("<<"))
    return sources


def image_platform(root: Path, image_name: str) -> str | None:
    """``linux/arm64`` when the image's base is an arm64 one (e.g. ``...-aarch64``), else None (the builder's)."""
    text = (root / dockerfile_path(image_name)).read_text()
    bases = [args[0] for keyword, args in _instructions(text) if keyword == "FROM" and args]
    return ARM64 if any(re.search(r"aarch64|arm64", b) for b in bases) else None


def _build_files(root: Path, image_name: str) -> list[str]:
    """What every build of ``image_name`` reads whatever its Dockerfile says: the Dockerfile, its ``.dockerignore``
    and the buildspec (when the checkout has them)."""
    dockerfile = dockerfile_path(image_name)
    if not (root / dockerfile).is_file():
        raise BuildError(f"Build input {dockerfile!r} is missing under {root}: restore it or fix the image name.")
    return [dockerfile, *(e for e in (f"{dockerfile}.dockerignore", BUILDSPEC) if (root / e).is_file())]


def image_inputs(root: Path, image_name: str) -> list[str]:
    """The context entries the build of ``image_name`` reads: ``_build_files``, then the Dockerfile's COPY/ADD
    sources as written (files, folders or globs)."""
    own = _build_files(root, image_name)
    return own + copy_sources((root / own[0]).read_text())


def build_context_files(root: Path, image_name: str) -> list[str]:
    """Every file the build of ``image_name`` reads from its context: the ``image_inputs`` entries, folders walked and
    globs expanded, less what the Dockerfile's ``.dockerignore`` excludes from them (BuildKit never sends those)."""
    own = _build_files(root, image_name)
    ignore = root / f"{dockerfile_path(image_name)}.dockerignore"
    rules = dockerignore_rules(ignore.read_text()) if ignore.is_file() else []
    found: set[str] = set()
    for entry in copy_sources((root / own[0]).read_text()):
        matches = sorted(root.glob(entry)) if any(c in entry for c in "*?[") else [root / entry]
        for match in matches or [root / entry]:
            found.update(collect_files(root, [match.relative_to(root).as_posix()]))
    return sorted(set(own) | {f for f in found if not dockerignore_excludes(rules, f)})


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
