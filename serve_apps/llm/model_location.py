"""Where a replica loads its model from: ``args.model`` as raylift's stage step left it.

- a local folder or a hub repo id: used as is;
- ``s3://bucket/prefix`` (the staged model): the same prefix under a mounted path is used when there
  is one (``RAYLIFT_MODEL_MOUNT``, else ``HF_HOME``: e.g. Mountpoint for S3 on EKS); otherwise the
  files are pulled into a local cache (``RAYLIFT_MODEL_CACHE``, default ``~/.cache/raylift/models``)
  and checked against raylift's manifest (size + sha256). Files already there and verified are kept,
  so a second replica on the node, or a restart, downloads nothing.

This module runs inside the Ray cluster (runtime environment), where raylift itself is not installed:
it needs only boto3 (credentials and ``AWS_ENDPOINT_URL`` from the usual AWS chain).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from llm import manifest  # raylift.manifest itself (a link): the one definition of a staged folder

log = logging.getLogger("ray.serve")

MANIFEST_NAME = manifest.MANIFEST_NAME
VERIFIED_NAME = ".raylift-verified.json"  # per cache dir: rel -> [size, mtime_ns, sha256] already checked
CACHE_ENV, MOUNT_ENV = "RAYLIFT_MODEL_CACHE", "RAYLIFT_MODEL_MOUNT"


class ModelLocationError(RuntimeError):
    """The model cannot be found or does not match what raylift staged (the message says what to do)."""


def resolve_model(model: str, *, streamed: bool = False) -> str:
    """What vLLM loads for ``model`` (see the module docstring). ``streamed``: vLLM's Run:ai streamer
    (``load_format: runai_streamer``) reads the staged ``s3://`` prefix itself, straight into memory, so
    nothing is copied to this node's disk; the prefix is only checked to hold every staged file."""
    if not model.startswith("s3://"):
        return model
    bucket, _, prefix = model[5:].partition("/")
    prefix = prefix.strip("/")
    if not bucket or not prefix:
        raise ModelLocationError(f"Model {model!r} is not s3://bucket/prefix: point args.model at a staged model.")
    if streamed:
        check_staged(bucket, prefix)
        log.info("model %s streamed by vLLM's Run:ai streamer from S3 (no copy on this node)", model)
        return f"s3://{bucket}/{prefix}"
    mounted = find_mounted(bucket, prefix)
    if mounted is not None:
        log.info("model %s read from the mounted path %s", model, mounted)
        return str(mounted)
    return str(download(bucket, prefix, cache_root()))


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "raylift" / "models").expanduser()


def safe_rel(rel: str) -> str:
    """A manifest path as a relative POSIX path inside the model folder; refuse anything that escapes it."""
    try:
        return manifest.safe_rel(rel)
    except manifest.UnsafeManifestPath as exc:
        raise ModelLocationError(str(exc)) from None


# -- mounted (HF_HOME-style) ----------------------------------------------------------------------
def mount_roots() -> list[Path]:
    roots = [os.environ.get(MOUNT_ENV), os.environ.get("HF_HOME")]
    return [Path(r) for r in roots if r and Path(r).is_dir()]


def find_mounted(bucket: str, prefix: str) -> Path | None:
    """The staged folder under a mount root: ``<root>/<bucket>/<prefix>``, ``<root>/<prefix>`` or the
    prefix minus leading parts (a mount of a sub-prefix), down to ``<model>/<revision>``. Accepted only
    with a complete raylift manifest whose files are all there with their sizes (no hashing: a mount
    would read the whole model)."""
    parts = prefix.split("/")
    for root in mount_roots():
        candidates = [root / bucket / prefix] + [root.joinpath(*parts[i:]) for i in range(len(parts) - 1)]
        for folder in candidates:
            if _complete_by_size(folder):
                return folder
    return None


def _complete_by_size(folder: Path) -> bool:
    try:
        manifest = json.loads((folder / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return False
    files = manifest.get("files") or {}
    if manifest.get("complete") is False or not files:
        return False
    try:
        return all((folder / safe_rel(rel)).stat().st_size == int(e["size"]) for rel, e in files.items())
    except (OSError, ModelLocationError):
        return False


# -- download into the cache ----------------------------------------------------------------------
def s3_client() -> Any:
    """S3 from the usual AWS chain (``AWS_ENDPOINT_URL`` included): the replica's one way to the store."""
    import boto3

    return boto3.client("s3")


def _manifest(s3: Any, bucket: str, prefix: str, sizes: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """``rel -> {size, sha256?}``: raylift's manifest, else (a prefix raylift did not stage) the listing (``sizes``
    when the caller has listed the prefix already)."""
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST_NAME}")["Body"].read()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        if code not in ("NoSuchKey", "404"):
            raise ModelLocationError(
                f"Cannot read s3://{bucket}/{prefix}/{MANIFEST_NAME} ({code}): check the replica's AWS "
                "credentials (task/pod role) and the bucket name."
            ) from None
        return _listing(s3, bucket, prefix, sizes)
    manifest = json.loads(body)
    if manifest.get("complete") is False:
        raise ModelLocationError(
            f"Staging of s3://{bucket}/{prefix} did not finish (manifest incomplete): re-run the stage step."
        )
    return {safe_rel(rel): entry for rel, entry in (manifest.get("files") or {}).items()}


def _sizes(s3: Any, bucket: str, prefix: str) -> dict[str, int]:
    """``rel -> size`` of every object under the prefix (one paginated listing)."""
    sizes: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents") or []:
            sizes[safe_rel(obj["Key"][len(prefix) + 1 :])] = int(obj["Size"])
    return sizes


def _listing(s3: Any, bucket: str, prefix: str, sizes: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    listed = _sizes(s3, bucket, prefix) if sizes is None else sizes
    files = {rel: {"size": size} for rel, size in listed.items()}
    if not files:
        raise ModelLocationError(f"s3://{bucket}/{prefix} holds no model files: stage the model first.")
    log.warning("s3://%s/%s has no %s: files are checked by size only", bucket, prefix, MANIFEST_NAME)
    return files


def check_staged(bucket: str, prefix: str) -> None:
    """Every file raylift's manifest names is under the prefix with its size (one listing; no byte of weights
    read): a replica never streams a half-staged or replaced model. The staged prefix is content-addressed, so
    the sizes and the complete manifest stand for the sha256 the download path checks."""
    s3 = s3_client()
    listed = _sizes(s3, bucket, prefix)
    files = _manifest(s3, bucket, prefix, listed)
    wrong = []
    for rel, entry in sorted(files.items()):
        if rel not in listed:
            wrong.append(f"{rel} missing")
        elif listed[rel] != int(entry["size"]):
            wrong.append(f"{rel} is {listed[rel]} bytes, staged {entry['size']}")
    if wrong:
        raise ModelLocationError(
            f"s3://{bucket}/{prefix} does not hold the staged model ({', '.join(wrong[:5])}): re-run the stage step."
        )


@contextmanager
def node_lock(folder: Path) -> Iterator[None]:
    """One replica at a time works in ``folder`` on this node (replicas start side by side): a model download,
    a warm-up cache restore."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f".{folder.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def download(bucket: str, prefix: str, root: Path) -> Path:
    """Pull ``s3://bucket/prefix`` into ``root/bucket/prefix``; verify every file; drop files not staged."""
    folder = (root / bucket / prefix).resolve()
    if root.resolve() not in folder.parents:
        raise ModelLocationError(f"Refusing s3://{bucket}/{prefix}: it would land outside {root}.")
    s3 = s3_client()
    files = _manifest(s3, bucket, prefix)
    with node_lock(folder):
        verified_path = folder / VERIFIED_NAME
        try:
            verified: dict[str, list[Any]] = json.loads(verified_path.read_text())
        except (OSError, ValueError):
            verified = {}
        fetched = kept = 0
        for rel, entry in sorted(files.items()):
            path = (folder / rel).resolve()
            if folder not in path.parents:
                raise ModelLocationError(f"Refusing model file {rel!r}: it would escape {folder}.")
            if _still_good(path, entry, verified.get(rel)):
                kept += 1
                continue
            verified[rel] = _fetch(s3, bucket, f"{prefix}/{rel}", path, entry)
            fetched += 1
        wanted = set(files) | {VERIFIED_NAME}
        for stale in [p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix() not in wanted]:
            stale.unlink()  # e.g. a shard of an earlier staging of the same revision
        verified = {rel: v for rel, v in verified.items() if rel in files}
        verified_path.write_text(json.dumps(verified))
    log.info("model s3://%s/%s in %s: %d file(s) downloaded, %d already there", bucket, prefix, folder, fetched, kept)
    return folder


def _still_good(path: Path, entry: dict[str, Any], seen: list[Any] | None) -> bool:
    """True when the cached file is the staged one: same size, and sha256 checked (now or before, unchanged)."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != int(entry["size"]):
        return False
    want = entry.get("sha256")
    if want is None:
        return True
    if seen is not None and seen[:2] == [st.st_size, st.st_mtime_ns] and seen[2] == want:
        return True
    return manifest.sha256_file(path) == want


def _fetch(s3: Any, bucket: str, key: str, path: Path, entry: dict[str, Any]) -> list[Any]:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part-{os.getpid()}")
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        try:
            s3.download_file(bucket, key, str(tmp))
        except (ClientError, BotoCoreError) as exc:
            raise ModelLocationError(
                f"Downloading s3://{bucket}/{key} failed ({exc}): check the replica's AWS credentials "
                "(task/pod role, AWS_ENDPOINT_URL) and that the model is still staged."
            ) from None
        size, want = tmp.stat().st_size, entry.get("sha256")
        if size != int(entry["size"]) or (want is not None and manifest.sha256_file(tmp) != want):
            raise ModelLocationError(
                f"s3://{bucket}/{key} does not match raylift's manifest (size {size} vs {entry['size']}"
                f"{', sha256 differs' if size == int(entry['size']) else ''}): re-run the stage step."
            )
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, entry.get("sha256")]
