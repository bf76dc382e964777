"""Object stores behind one small interface: a local directory or an ``s3://`` prefix.

The model store, run records and the last-good Serve config all live in one of these, so the same
code works on ``local`` (a directory) and on AWS (S3, through the Amazon provider's ``S3Hook``).
Keys are validated: nothing may escape the store's root (no ``..``, no absolute keys).
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raylift.errors import RayliftError, StagingError, UnsafePathError

TMP_MARK = ".raylift-tmp-"  # in every temporary name: never listed, never a model file
FENCE_SUFFIX = ".raylift-fence"  # a local record's fencing token and lock file, beside it: never listed
FENCE_META = "raylift-fence"  # the S3 object metadata (x-amz-meta-raylift-fence) holding "<token> <holder>"
FENCE_LOCK_WAIT_S = 30.0  # a local conditional write waits this long for another writer's compare-and-write


class ConditionalWriteError(RayliftError):
    """The store cannot do a conditional write (no backend for it, or its lock was not free in time)."""


@dataclass(frozen=True)
class Version:
    """What a conditional write compares. ``tag``: the object's version (an S3 ETag; a local file's inode, mtime
    and size); None when there is no object. ``fence``/``holder``: the fencing token and holder of the lease
    whose write made it (0 and "": a write that carried none)."""

    tag: str | None
    fence: int = 0
    holder: str = ""


def _fence_text(fence: int, holder: str) -> str:
    from urllib.parse import quote

    return f"{fence} {quote(holder, safe='/:@+')}"  # ASCII, as S3 metadata must be


def _parse_fence(text: str) -> tuple[int, str]:
    from urllib.parse import unquote

    token, _, holder = text.strip().partition(" ")
    try:
        return int(token), unquote(holder)
    except ValueError:
        return 0, ""


def _tmp_name(dest: Path) -> Path:
    """A temporary name beside ``dest`` unique to this write (process + random), so two writers never
    share one; it does not end in a weight suffix, so an engine globbing ``*.safetensors`` skips it."""
    return dest.with_name(f".{dest.name}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")


def safe_key(key: str) -> str:
    """Normalise a relative store key; refuse ones that are absolute or climb out of the root."""
    if not key or key.startswith(("/", "\\")) or "\\" in key or "\x00" in key:
        raise UnsafePathError(f"Refusing store key {key!r}: keys must be relative POSIX paths.")
    norm = posixpath.normpath(key)
    if norm == "." or norm.startswith("../") or norm == ".." or "/../" in f"/{key}/":
        raise UnsafePathError(f"Refusing store key {key!r}: it would escape the store root.")
    return norm


class ObjectStore(ABC):
    """Minimal blob store: enough for manifests, model files, run records and state."""

    uri: str

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def read_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def upload_file(self, key: str, path: Path, *, sha256: str | None = None) -> None:
        """Copy ``path`` to ``key``; with ``sha256``, refuse (StagingError) a copy whose bytes differ."""

    def download_file(self, key: str, path: Path) -> None:
        """Stream ``key`` into the local file ``path`` (written under a temporary name, then renamed)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_name(path)
        try:
            tmp.write_bytes(self.read_bytes(key))
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        """Remove ``key`` (used to drop files that are not part of a staged model)."""
        raise NotImplementedError

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]:
        """Keys under ``prefix`` (relative to the store root)."""

    def version(self, key: str) -> Version:
        """``key``'s version now, as ``write_if`` compares it."""
        raise ConditionalWriteError(f"The store {self.uri} has no conditional write: use a directory or s3://.")

    def write_if(self, key: str, data: bytes, *, expected: Version, fence: int, holder: str) -> bool:
        """Write ``data`` at ``key`` only if its version is still ``expected.tag`` (None: only if there is no
        object), recording ``fence`` and ``holder`` with it; False, writing nothing, if it changed."""
        raise ConditionalWriteError(f"The store {self.uri} has no conditional write: use a directory or s3://.")

    def child_uri(self, key: str) -> str:
        return f"{self.uri.rstrip('/')}/{safe_key(key)}"

    def read_json(self, key: str, default: Any = None) -> Any:
        if not self.exists(key):
            return default
        return json.loads(self.read_bytes(key))

    def write_json(self, key: str, value: Any) -> None:
        self.write_bytes(key, json.dumps(value, indent=2, sort_keys=True, default=str).encode())


class LocalStore(ObjectStore):
    """A directory on this machine."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(str(root).removeprefix("file://")).expanduser().resolve()
        self.uri = str(self.root)

    def _path(self, key: str) -> Path:
        path = (self.root / safe_key(key)).resolve()
        if path != self.root and self.root not in path.parents:
            raise UnsafePathError(f"Refusing store key {key!r}: it resolves outside {self.root}.")
        return path

    def path(self, key: str) -> Path:
        """The local file for ``key`` (for engines that load from a directory)."""
        return self._path(key)

    def exists(self, key: str) -> bool:
        return self._path(key).exists()

    def read_bytes(self, key: str) -> bytes:
        return self._path(key).read_bytes()

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_name(path)
        try:
            tmp.write_bytes(data)
            tmp.replace(path)  # atomic: a reader never sees half a file
        finally:
            tmp.unlink(missing_ok=True)

    def upload_file(self, key: str, path: Path, *, sha256: str | None = None) -> None:
        """Copy under a temporary name unique to this writer, re-hash the copy when ``sha256`` is given,
        and only then rename it into place: a reader sees the old file or the verified new one."""
        from raylift.manifest import sha256_file

        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_name(dest)
        try:
            shutil.copyfile(path, tmp)
            if sha256 is not None and (got := sha256_file(tmp)) != sha256:
                raise StagingError(
                    f"The copy of {path} has sha256 {got[:12]}…, not the {sha256[:12]}… it was staged as: the source "
                    "changed while it was being staged. Stage again once it is complete."
                )
            tmp.replace(dest)
        finally:
            tmp.unlink(missing_ok=True)

    def download_file(self, key: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_name(path)
        try:
            shutil.copyfile(self._path(key), tmp)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        _fence_file(path).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> Iterator[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return
        for p in sorted(base.rglob("*")):
            if (p.is_file() and TMP_MARK not in p.name and not p.name.endswith(".tmp")
                    and not p.name.endswith(FENCE_SUFFIX)):
                yield p.relative_to(self.root).as_posix()

    # Conditional writes: compare-and-write under an exclusive fcntl lock on the record's fence file
    # (``.<name>.raylift-fence``, which also holds the fencing token of the write that made the record). Why a lock
    # and not os.link like the lease (``raylift.lease``): a record keeps its one name, which readers open, and a
    # link cannot replace a name; a compare then a rename is atomic among writers only under a lock. flock is
    # released by the kernel when its process dies (no stale lock file), and Linux NFS clients map it to NFS
    # byte-range locks, so it holds on a shared directory too. Readers take no lock: the rename is atomic.
    def version(self, key: str) -> Version:
        path = self._path(key)
        with _locked(_fence_file(path), exclusive=False) as fh:
            return _local_version(path, fh)

    def write_if(self, key: str, data: bytes, *, expected: Version, fence: int, holder: str) -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(_fence_file(path), exclusive=True) as fh:
            if _local_version(path, fh).tag != expected.tag:
                return False
            fh.seek(0)  # the token first: a crash before the rename leaves a record that refuses more, not less
            fh.truncate()
            fh.write(_fence_text(fence, holder).encode())
            fh.flush()
            os.fsync(fh.fileno())
            self.write_bytes(key, data)
        return True


def _fence_file(path: Path) -> Path:
    return path.with_name(f".{path.name}{FENCE_SUFFIX}")


class _locked:
    """An fcntl lock on ``path`` (created if missing) for a ``with`` block, waiting up to FENCE_LOCK_WAIT_S."""

    def __init__(self, path: Path, *, exclusive: bool) -> None:
        self.path, self.exclusive = path, exclusive

    def __enter__(self) -> Any:
        import fcntl

        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fh = open(self.path, "a+b")  # noqa: SIM115 (closed in __exit__)
        mode = (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        deadline = time.monotonic() + FENCE_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(self.fh.fileno(), mode)
                return self.fh
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self.fh.close()
                    raise ConditionalWriteError(
                        f"Another writer has held {self.path} for over {FENCE_LOCK_WAIT_S:.0f}s (a process stopped "
                        "mid-write?); nothing was written. Find it with `fuser` and let it finish, then retry."
                    ) from None
                time.sleep(0.02)

    def __exit__(self, *exc: object) -> None:
        self.fh.close()  # closing releases the lock


def _local_version(path: Path, fence_fh: Any) -> Version:
    fence_fh.seek(0)
    token, holder = _parse_fence(fence_fh.read().decode(errors="replace"))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Version(None, token, holder)
    # every write renames a new file into place: a new inode (the old one is still in use while it is created)
    return Version(f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}", token, holder)


class S3Store(ObjectStore):
    """An ``s3://bucket/prefix`` through the Amazon provider's S3Hook (credentials from the connection)."""

    def __init__(self, uri: str, aws_conn_id: str | None = "aws_default") -> None:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        if not uri.startswith("s3://"):
            raise UnsafePathError(f"S3Store needs an s3:// URI, got {uri!r}.")
        self.uri = uri.rstrip("/")
        bucket, _, prefix = uri[5:].partition("/")
        self.bucket, self.prefix = bucket, prefix.strip("/")
        self.hook = S3Hook(aws_conn_id=aws_conn_id)

    def _key(self, key: str) -> str:
        key = safe_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def exists(self, key: str) -> bool:
        return self.hook.check_for_key(self._key(key), bucket_name=self.bucket)

    def read_bytes(self, key: str) -> bytes:
        obj = self.hook.get_key(self._key(key), bucket_name=self.bucket)
        return obj.get()["Body"].read()

    def write_bytes(self, key: str, data: bytes) -> None:
        self.hook.load_bytes(data, key=self._key(key), bucket_name=self.bucket, replace=True)

    def upload_file(self, key: str, path: Path, *, sha256: str | None = None) -> None:
        """Upload; with ``sha256``, S3 itself checks the bytes it received (ChecksumSHA256)."""
        extra: dict[str, Any] = {}
        if sha256 is not None:
            import base64

            extra = {"ChecksumSHA256": base64.b64encode(bytes.fromhex(sha256)).decode()}
            with path.open("rb") as body:
                try:
                    self.hook.get_conn().put_object(Bucket=self.bucket, Key=self._key(key), Body=body, **extra)
                except Exception as exc:  # botocore's BadDigest and friends
                    raise StagingError(f"Uploading {path} to {self.child_uri(key)} failed: {exc}") from exc
            return
        self.hook.load_file(str(path), key=self._key(key), bucket_name=self.bucket, replace=True)

    def download_file(self, key: str, path: Path) -> None:
        """Streamed to disk by boto3's transfer manager (never the whole object in memory)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_name(path)
        try:
            self.hook.get_conn().download_file(self.bucket, self._key(key), str(tmp))
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        self.hook.delete_objects(bucket=self.bucket, keys=[self._key(key)])

    def list(self, prefix: str = "") -> Iterator[str]:
        # Always a folder: with a trailing "/", s3://b/models/tiny never lists models/tiny-llama/...
        full = (self._key(prefix) if prefix else self.prefix).rstrip("/")
        full = f"{full}/" if full else ""
        strip = len(self.prefix) + 1 if self.prefix else 0
        for key in self.hook.list_keys(bucket_name=self.bucket, prefix=full) or []:
            yield key[strip:]


    # Conditional writes: S3's own (PutObject ``If-Match: <etag>`` replaces only the version that was read,
    # ``If-None-Match: *`` creates only; the loser gets 412, or 409 for a concurrent conditional write), the
    # fencing token in the object's metadata.
    def version(self, key: str) -> Version:
        try:
            head = self.hook.get_conn().head_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:
            if _s3_status(exc) == 404:
                return Version(None)
            raise
        token, holder = _parse_fence(str((head.get("Metadata") or {}).get(FENCE_META, "")))
        return Version(str(head["ETag"]), token, holder)

    def write_if(self, key: str, data: bytes, *, expected: Version, fence: int, holder: str) -> bool:
        condition = {"IfNoneMatch": "*"} if expected.tag is None else {"IfMatch": expected.tag}
        try:
            self.hook.get_conn().put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data, Metadata={FENCE_META: _fence_text(fence, holder)},
                **condition,
            )
        except Exception as exc:
            if _s3_status(exc) in {409, 412}:
                return False
            raise
        return True


def _s3_status(exc: Exception) -> int | None:
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return None
    code = str(response.get("Error", {}).get("Code", ""))
    if code in {"PreconditionFailed", "ConditionalRequestConflict"}:
        return 412
    if code in {"NoSuchKey", "404", "NotFound"}:
        return 404
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return int(status) if status is not None else None


def open_store(uri: str, *, aws_conn_id: str | None = "aws_default") -> ObjectStore:
    """A store for ``uri``: ``s3://`` through S3Hook, anything else a local directory."""
    if uri.startswith("s3://"):
        return S3Store(uri, aws_conn_id=aws_conn_id)
    return LocalStore(uri)
