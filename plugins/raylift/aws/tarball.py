"""An HTTPS tarball as a model source: downloaded with retries, checked, and extracted safely.

A tarball is refused when a member would land outside the destination (``..``, absolute paths,
links pointing out, devices) or when the download or archive is truncated.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from raylift.errors import ModelSourceError, UnsafePathError

log = logging.getLogger(__name__)

TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class Tarball:
    path: Path
    sha256: str
    size: int


def is_tarball_url(source: str) -> bool:
    base = source.split("?", 1)[0].lower()
    return source.startswith(("https://", "http://")) and base.endswith(TARBALL_SUFFIXES)


def _redact(url: str) -> str:
    """The URL without its query string (presigned URLs carry credentials there)."""
    return url.split("?", 1)[0]


def download(url: str, dest: Path, *, attempts: int = 5, backoff_s: float = 1.0, timeout_s: float = 60.0) -> Tarball:
    """Stream ``url`` to ``dest``; retry transport errors, 5xx/429 and short bodies with exponential backoff."""
    import httpx

    dest.parent.mkdir(parents=True, exist_ok=True)
    last = ""
    for attempt in range(1, attempts + 1):
        tmp = dest.with_name(dest.name + ".part")
        try:
            with httpx.stream("GET", url, timeout=timeout_s, follow_redirects=True) as reply:
                if reply.status_code == 429 or reply.status_code >= 500:
                    raise _Retryable(f"HTTP {reply.status_code}")
                if reply.status_code >= 400:
                    raise ModelSourceError(
                        f"Downloading {_redact(url)} failed with HTTP {reply.status_code}: check the URL and access."
                    )
                expected = int(reply.headers["content-length"]) if "content-length" in reply.headers else None
                digest, size = hashlib.sha256(), 0
                with tmp.open("wb") as fh:
                    for chunk in reply.iter_raw(_CHUNK):
                        fh.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
                if expected is not None and size != expected:
                    raise _Retryable(f"truncated download: {size} of {expected} bytes")
            tmp.replace(dest)
            return Tarball(dest, digest.hexdigest(), size)
        except (_Retryable, httpx.TransportError) as exc:
            last = f"{type(exc).__name__}: {exc}" if not isinstance(exc, _Retryable) else str(exc)
            tmp.unlink(missing_ok=True)
            if attempt < attempts:
                wait = backoff_s * 2 ** (attempt - 1)
                log.warning("Download of %s failed (%s); retry %d/%d in %.1fs", _redact(url), last, attempt, attempts, wait)
                time.sleep(wait)
    raise ModelSourceError(f"Downloading {_redact(url)} failed after {attempts} attempts ({last}).")


class _Retryable(Exception):
    pass


def _check_member(member: tarfile.TarInfo, archive: str) -> None:
    name = member.name
    norm = posixpath.normpath(name)
    if name.startswith(("/", "\\")) or norm == ".." or norm.startswith("../") or "\\" in name:
        raise UnsafePathError(f"Refusing {archive}: member {name!r} would be written outside the destination.")
    if member.issym() or member.islnk():
        target = posixpath.normpath(posixpath.join(posixpath.dirname(norm), member.linkname))
        if member.linkname.startswith("/") or target == ".." or target.startswith("../"):
            raise UnsafePathError(f"Refusing {archive}: link {name!r} -> {member.linkname!r} points outside it.")
    if member.isdev() or member.isfifo():
        raise UnsafePathError(f"Refusing {archive}: member {name!r} is a device or FIFO.")


def extract(archive: Path, dest: Path, *, label: str | None = None) -> Path:
    """Extract ``archive`` into ``dest`` after checking every member; returns the model folder.

    When the archive holds a single top-level folder, that folder is the model folder.
    """
    label = label or archive.name
    tmp = dest.with_name(dest.name + ".extracting")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        with tarfile.open(archive, "r:*") as tf:
            members = tf.getmembers()  # reads to the end: a truncated archive fails here
            for member in members:
                _check_member(member, label)
            tf.extractall(tmp, members=members, filter="data")
    except (tarfile.ReadError, EOFError, tarfile.CompressionError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelSourceError(f"Archive {label} is truncated or not a tar archive ({exc}): download it again.") from None
    except (UnsafePathError, tarfile.FilterError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, UnsafePathError):
            raise
        raise UnsafePathError(f"Refusing {label}: {exc}") from None
    shutil.rmtree(dest, ignore_errors=True)
    tmp.replace(dest)
    children = [p for p in dest.iterdir()]
    return children[0] if len(children) == 1 and children[0].is_dir() else dest


def fetch_tarball(url: str, cache_dir: Path, **download_kwargs: float) -> tuple[Path, str]:
    """Download and extract ``url`` under ``cache_dir``; returns (model folder, archive sha256)."""
    key = hashlib.sha256(_redact(url).encode()).hexdigest()[:16]
    tarball = download(url, cache_dir / "tarballs" / f"{key}.tar", **download_kwargs)  # type: ignore[arg-type]
    folder = extract(tarball.path, cache_dir / "tarballs" / f"{key}-{tarball.sha256[:12]}", label=_redact(url))
    tarball.path.unlink(missing_ok=True)
    return folder, tarball.sha256
