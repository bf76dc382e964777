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
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from raylift.errors import StagingError, UnsafePathError

TMP_MARK = ".raylift-tmp-"  # in every temporary name: never listed, never a model file


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
        self._path(key).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> Iterator[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.exists():
            return
        for p in sorted(base.rglob("*")):
            if p.is_file() and TMP_MARK not in p.name and not p.name.endswith(".tmp"):
                yield p.relative_to(self.root).as_posix()


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


def open_store(uri: str, *, aws_conn_id: str | None = "aws_default") -> ObjectStore:
    """A store for ``uri``: ``s3://`` through S3Hook, anything else a local directory."""
    if uri.startswith("s3://"):
        return S3Store(uri, aws_conn_id=aws_conn_id)
    return LocalStore(uri)
