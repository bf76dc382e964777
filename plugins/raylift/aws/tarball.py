"""An HTTPS tarball as a model source: downloaded with retries, checked, and extracted safely.

A tarball is refused when a member would land outside the destination (``..``, absolute paths,
links pointing out, devices: tarfile's own ``data`` filter) or when the download or archive is truncated.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from raylift.errors import ModelSourceError, UnsafePathError

if TYPE_CHECKING:
    from tenacity import RetryCallState

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
    """Stream ``url`` to ``dest``; retry transport errors, 5xx/429 and short bodies with exponential backoff
    (tenacity), and name the last failure when the attempts run out."""
    import httpx
    from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

    dest.parent.mkdir(parents=True, exist_ok=True)

    def warn(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("Download of %s failed (%s); retry %d/%d in %.1fs", _redact(url), _why(exc),
                    state.attempt_number, attempts, state.upcoming_sleep)  # fmt: skip

    retrying = Retrying(
        retry=retry_if_exception_type((_Retryable, httpx.TransportError)),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=backoff_s, max=60),
        before_sleep=warn,
    )
    try:
        return retrying(_download_once, url, dest, timeout_s)
    except RetryError as exc:
        last = _why(exc.last_attempt.exception())
        raise ModelSourceError(f"Downloading {_redact(url)} failed after {attempts} attempts ({last}).") from None


def _download_once(url: str, dest: Path, timeout_s: float) -> Tarball:
    import httpx

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
    finally:
        tmp.unlink(missing_ok=True)


def _why(exc: BaseException | None) -> str:
    """A retryable failure in a few words; a transport error's URL is never part of it (it may carry a query)."""
    if exc is None or isinstance(exc, _Retryable):
        return str(exc)
    return type(exc).__name__


class _Retryable(Exception):
    pass


def _refuse_unsafe(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter (it refuses "..", links leading out and device files), plus a refusal of
    absolute names, which that filter would quietly make relative: a model archive has no reason to hold one."""
    if member.name.startswith(("/", "\\")):
        raise tarfile.AbsolutePathError(member)
    return tarfile.data_filter(member, dest_path)


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
            tf.extractall(tmp, members=members, filter=_refuse_unsafe)
    except (tarfile.ReadError, EOFError, tarfile.CompressionError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelSourceError(f"Archive {label} is truncated or not a tar archive ({exc}): download it again.") from None
    except tarfile.FilterError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UnsafePathError(f"Refusing {label}: {exc}. Nothing from it was kept.") from None
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
