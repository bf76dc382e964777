"""Pre-stage a model to ``s3://bucket/prefix/<model>/<revision>/`` so clusters load it from S3, not the hub.

Sources and the manifest format are :mod:`raylift.staging`'s; this module adds what S3 needs: an
identity and bucket check first, parallel multipart uploads across files with throttling retries and a
storage class, hashing overlapped with uploads, an HTTPS tarball source, and a final verification
against S3 itself.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raylift.aws.identity import caller_identity, check_bucket
from raylift.aws.s3_transfer import S3Uploader, TransferSettings, UploadJob
from raylift.aws.tarball import fetch_tarball, is_tarball_url
from raylift.errors import ModelSourceError, StagingError
from raylift.manifest import MANIFEST_NAME, Manifest, content_digest, sha256_file
from raylift.records import StagedModel
from raylift.staging.sources import HUB_REPO_RE, hub_token_from_connection, resolve_source
from raylift.staging.stage import content_key
from raylift.store import safe_key

log = logging.getLogger(__name__)

HASH_THREADS = 1  # one hashes ~5x faster than moto/S3 take the bytes; more would only take CPU from the uploads
MANIFEST_EVERY_S = 2.0  # progress manifest (what a resumed run skips) at most this often


@dataclass(frozen=True)
class S3Destination:
    """Where models go: ``s3://bucket/prefix/``."""

    bucket: str
    prefix: str = "models"
    aws_conn_id: str | None = "aws_default"
    region_name: str | None = None
    storage_class: str | None = None

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix.strip('/')}" if self.prefix.strip("/") else f"s3://{self.bucket}"


def _is_hub(source: str) -> bool:
    return source.startswith("hf://") or (not Path(source).exists() and bool(HUB_REPO_RE.match(source)))


def hub_token(hf_conn_id: str) -> str | None:
    """The hub token kept in an Airflow connection's password (never logged, never returned to XCom)."""
    return hub_token_from_connection(hf_conn_id)


def resolve(
    source: str, revision: str | None, cache_dir: Path, *, aws_conn_id: str | None, hf_conn_id: str | None,
    allow_patterns: list[str] | None = None, ignore_patterns: list[str] | None = None,
) -> tuple[Path, str, frozenset[str] | None]:
    """A local folder with the model, and its revision. Hub tokens are fetched only if anonymous access fails."""
    if is_tarball_url(source):
        folder, sha = fetch_tarball(source, cache_dir)
        return folder, revision or f"tar-{sha[:12]}", None
    if source.startswith("s3://"):  # a clear error for a source bucket that is missing or not readable
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        check_bucket(
            S3Hook(aws_conn_id=aws_conn_id).get_conn(),
            source[5:].split("/", 1)[0],
            role="Model source bucket",
            fix=f"check the 'model_source' param ({source!r}) and that the bucket is in this account/region",
        )
    try:
        found = resolve_source(source, revision=revision, cache_dir=cache_dir, aws_conn_id=aws_conn_id,
                               allow_patterns=allow_patterns, ignore_patterns=ignore_patterns)
    except ModelSourceError:
        if not (hf_conn_id and _is_hub(source)):
            raise
        log.info("Anonymous hub download of %s failed; retrying with the token of connection %s", source, hf_conn_id)
        found = resolve_source(
            source, revision=revision, cache_dir=cache_dir, aws_conn_id=aws_conn_id, hf_token=hub_token(hf_conn_id),
            allow_patterns=allow_patterns, ignore_patterns=ignore_patterns,
        )
    return found.path, found.revision, found.include


def forget_mismatched(uploader: S3Uploader, prefix_key: str) -> int:
    """Drop manifest entries whose object is missing or differs in S3, so this run uploads them again.

    The manifest is trusted for what to skip; S3 objects can be deleted or overwritten behind its back.
    ``prefix_key`` is the model's folder as an object key (``<store prefix>/<model>/<revision>``).
    """
    key = f"{prefix_key}/{MANIFEST_NAME}"
    manifest = uploader.read_json(key)
    if not manifest or not manifest.get("files"):
        return 0
    stale = []
    for rel, entry in manifest["files"].items():
        remote = uploader.head(f"{prefix_key}/{rel}")
        if remote is None or remote.size != int(entry["size"]) or remote.sha256 not in (None, entry["sha256"]):
            stale.append(rel)
    if stale:
        log.warning("%d staged file(s) are missing or changed in S3 and will be uploaded again: %s", len(stale), stale[:5])
        for rel in stale:
            del manifest["files"][rel]
        uploader.write_json(key, manifest | {"complete": False})
    return len(stale)


class HashCache:
    """sha256 per local file, kept in ``cache_dir`` and trusted while size and mtime are unchanged (as
    git's index does), so re-staging an unchanged model reads nothing but ``stat``."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = cache_dir / "sha256-cache.json"
        try:
            self._known: dict[str, list[Any]] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self._known = {}
        self._lock = threading.Lock()

    @staticmethod
    def _stat(path: Path) -> list[int]:
        st = path.stat()
        return [st.st_size, st.st_mtime_ns, st.st_ino]

    def known(self, path: Path) -> dict[str, Any] | None:
        """``{size, sha256}`` when ``path`` is unchanged since it was hashed, else None."""
        with self._lock:
            seen = self._known.get(str(path))
        return {"size": seen[0], "sha256": seen[3]} if seen and seen[:3] == self._stat(path) else None

    def entry(self, path: Path) -> dict[str, Any]:
        """``{size, sha256}`` (the manifest's entry), hashing only when needed."""
        cached = self.known(path)
        if cached is not None:
            return cached
        before = self._stat(path)
        digest = sha256_file(path)
        if self._stat(path) != before:
            raise StagingError(f"{path} changed while it was being read: stage again when it is complete.")
        with self._lock:
            self._known[str(path)] = [*before, digest]
        return {"size": before[0], "sha256": digest}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with self._lock:
            tmp.write_text(json.dumps(self._known))
        tmp.replace(self.path)


def model_files(folder: Path, include: frozenset[str] | None = None) -> dict[str, Path]:
    """``rel -> path`` of what is staged: as the generic stager, minus ``.cache`` and our own manifest
    (and, for hub sources, only the files the patterns chose)."""
    return {
        safe_key(p.relative_to(folder).as_posix()): p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".cache" not in p.relative_to(folder).parts and p.name != MANIFEST_NAME
        and (include is None or p.relative_to(folder).as_posix() in include)
    }


def stage_model_to_s3(
    *,
    source: str,
    model_id: str,
    destination: S3Destination,
    cache_dir: Path,
    revision: str | None = None,
    hf_conn_id: str | None = None,
    settings: TransferSettings | None = None,
    allow_patterns: list[str] | None = None,
    ignore_patterns: list[str] | None = None,
) -> StagedModel:
    """Check identity and bucket, resolve ``source``, upload what changed, verify it all in S3.

    Same manifest and layout as the generic stager (:func:`raylift.staging.stage.stage_model`), tuned
    for S3: files are hashed once (a cache keyed by size+mtime skips even that when unchanged) while
    earlier files upload, all files' parts share one pool of connections, one boto3 session serves the
    whole run, and a re-run of an unchanged model only reads the manifest and HEADs each object.
    """
    uploader = S3Uploader(
        destination.bucket,
        aws_conn_id=destination.aws_conn_id,
        region_name=destination.region_name,
        storage_class=destination.storage_class,
        settings=settings,
    )
    caller_identity(destination.aws_conn_id, destination.region_name, sts_client=uploader.sts_client())
    check_bucket(uploader.client, destination.bucket)
    folder, resolved_revision, include = resolve(
        source, revision, cache_dir, aws_conn_id=destination.aws_conn_id, hf_conn_id=hf_conn_id,
        allow_patterns=allow_patterns, ignore_patterns=ignore_patterns,
    )
    hashes = HashCache(cache_dir)
    try:
        staged = _stage(destination, uploader, hashes, folder, model_id, resolved_revision, include)
    finally:
        hashes.save()
    log.info(
        "Staged %s@%s to %s: %d copied (%d bytes), %d unchanged, all verified",
        model_id,
        resolved_revision,
        staged.uri,
        staged.copied_files,
        staged.copied_bytes,
        staged.skipped_files,
    )
    return staged


def _stage(
    destination: S3Destination, uploader: S3Uploader, hashes: HashCache, folder: Path, model_id: str, revision: str,
    include: frozenset[str] | None = None,
) -> StagedModel:
    files = model_files(folder, include)
    if not files:
        raise ModelSourceError(f"Model folder {folder} holds no files to stage.")
    # Hash first (threads; a stat-keyed cache skips unchanged files): the content digest names the folder,
    # so other weights under the same model_id and revision never overwrite what replicas load.
    with ThreadPoolExecutor(max_workers=HASH_THREADS, thread_name_prefix="sha256") as pool:
        hashed = dict(zip(files, pool.map(hashes.entry, files.values())))
    digest = content_digest(hashed)
    prefix = content_key(model_id, revision, digest)  # the model's folder in the model store
    root = destination.uri.removeprefix(f"s3://{destination.bucket}").strip("/")
    prefix_key = f"{root}/{prefix}" if root else prefix  # ... as an object key
    manifest_key = f"{prefix_key}/{MANIFEST_NAME}"

    def full_key(rel: str) -> str:
        return f"{prefix_key}/{rel}"

    def result(manifest: Manifest, copied: list[str]) -> StagedModel:
        return StagedModel(
            model_id=model_id,
            revision=revision,
            uri=f"{destination.uri}/{prefix}",
            manifest_uri=f"{destination.uri}/{prefix}/{MANIFEST_NAME}",
            files=manifest.files,
            copied_files=len(copied),
            skipped_files=len(files) - len(copied),
            copied_bytes=sum(int(manifest.files[rel]["size"]) for rel in copied),
            digest=digest,
        )

    # Unchanged since the last run (stat) and complete in S3: check the objects are there and stop.
    previous_json = uploader.read_json(manifest_key) or {}
    previous = Manifest.from_json(previous_json) if previous_json else Manifest(model_id, revision, str(folder))
    if previous_json.get("complete") and set(previous.files) == set(files):
        if all(hashes.known(path) == previous.files[rel] for rel, path in files.items()):
            try:
                uploader.verify({full_key(rel): entry for rel, entry in previous.files.items()})
                log.info("%s unchanged since it was staged to %s/%s: nothing to upload", folder, destination.uri, prefix)
                return result(previous, [])
            except StagingError as exc:
                log.warning("Staged copy differs from the manifest (%s); checking every file", exc)

    if forget_mismatched(uploader, prefix_key):
        previous = Manifest.from_json(uploader.read_json(manifest_key))
    # The folder (not the original URL) is recorded, so no presigned query string reaches the manifest.
    manifest = Manifest(model_id, revision, str(folder))
    done: dict[str, dict[str, Any]] = {}  # what is in S3 now: the manifest a resumed run trusts
    copied: list[str] = []
    # Biggest first: the long uploads start early and the small files fill in around them.
    order = sorted(files, key=lambda rel: (-files[rel].stat().st_size, rel))
    uploader.start(sum(files[rel].stat().st_size for rel in order), len(order))
    last_write = [0.0]

    def record(rel: str, force: bool = False) -> None:
        done[rel] = manifest.files[rel]
        if force or time.monotonic() - last_write[0] > MANIFEST_EVERY_S:
            uploader.write_json(manifest_key, Manifest(model_id, revision, str(folder), dict(done)).to_json() | {"complete": False})
            last_write[0] = time.monotonic()

    def jobs() -> Iterator[UploadJob]:
        for rel in order:
            entry = manifest.files[rel] = hashed[rel]
            if previous.files.get(rel) == entry:
                done[rel] = entry
                continue
            # the uploader sends the sha256 hashed above: S3 refuses bytes that changed since
            yield UploadJob(files[rel], full_key(rel), entry["sha256"], rel)

    def finished(job: UploadJob) -> None:
        # the bytes sent are the ones hashed only if the file is unchanged (size, mtime, inode) since
        if hashes.known(job.path) != hashed[job.rel]:
            raise StagingError(
                f"{job.path} changed while it was being staged (its object may not match sha256 "
                f"{hashed[job.rel]['sha256'][:12]}…): stage again once it is complete."
            )
        copied.append(job.rel)
        record(job.rel)

    try:
        uploader.upload_many(jobs(), finished)
    except StagingError:
        if done:  # keep what finished, so the re-run resumes after it
            uploader.write_json(manifest_key, Manifest(model_id, revision, str(folder), dict(done)).to_json() | {"complete": False})
        raise
    manifest.files = {rel: manifest.files[rel] for rel in sorted(manifest.files)}
    uploader.write_json(manifest_key, manifest.to_json() | {"complete": True})
    uploader.verify({full_key(rel): entry for rel, entry in manifest.files.items()})
    return result(manifest, sorted(copied))
