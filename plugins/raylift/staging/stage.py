"""Copy a resolved model folder into an ObjectStore, skipping files the manifest says are already there.

The model's place in the store is named by its content: ``<model>/<revision>/sha256-<digest[:16]>/``
(:func:`raylift.manifest.content_digest`). Different weights under the same ``model_id`` and
revision land in a new folder, so files of two versions never mix, a folder a replica loads is never
rewritten with other bytes, and the Serve app's ``args.model`` changes (a new code version: replicas
restart start-before-stop instead of keeping the old weights).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

from raylift.errors import StagingError
from raylift.manifest import MANIFEST_NAME, Manifest, content_digest, file_entry
from raylift.records import StagedModel
from raylift.staging.sources import resolve_source
from raylift.store import TMP_MARK, LocalStore, ObjectStore, safe_key

log = logging.getLogger(__name__)
SAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")


def model_key(model_id: str, revision: str) -> str:
    """``<model>/<revision>`` with characters a path or S3 key should not carry replaced."""
    return safe_key(f"{SAFE_NAME_RE.sub('--', model_id)}/{SAFE_NAME_RE.sub('--', revision)}")


DIGEST_DIR_PREFIX = "sha256-"


def content_key(model_id: str, revision: str, digest: str) -> str:
    """``<model>/<revision>/sha256-<digest[:16]>``: where the files with this content digest live."""
    return f"{model_key(model_id, revision)}/{DIGEST_DIR_PREFIX}{digest[:16]}"


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def stage_model(
    source: str,
    store: ObjectStore,
    *,
    model_id: str,
    revision: str | None = None,
    cache_dir: Path,
    aws_conn_id: str | None = "aws_default",
    hf_token: str | None = None,
    allow_patterns: list[str] | None = None,
    ignore_patterns: list[str] | None = None,
    upload: Callable[[ObjectStore, str, Path, str], None] | None = None,
    progress: Callable[[str], None] = log.info,
) -> StagedModel:
    """Stage ``source`` into ``store`` under ``<model>/<revision>/sha256-<digest>/`` with a manifest.

    A file whose size and sha256 match the manifest already in the store is not copied again, so an
    interrupted or repeated run only moves what is missing. ``upload`` lets cloud stores plug in a
    faster uploader (parallel multipart; called with the expected sha256); the default uses
    ``store.upload_file``, which verifies the copy.
    """
    resolved = resolve_source(
        source, revision=revision, cache_dir=cache_dir, aws_conn_id=aws_conn_id, hf_token=hf_token,
        allow_patterns=allow_patterns, ignore_patterns=ignore_patterns,
    )
    # is_file() follows symlinks, which is how hub snapshots point at their blobs. A source that is itself
    # a staged location (a redeploy of a staged model) carries our manifest: bookkeeping, not a model file.
    files = sorted(
        p
        for p in resolved.path.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(resolved.path).parts and p.name != MANIFEST_NAME
        and TMP_MARK not in p.name and resolved.selected(p.relative_to(resolved.path).as_posix())
    )
    # Hash everything first: the content digest names the destination folder.
    manifest = Manifest(model_id, resolved.revision, source)
    for path in files:
        manifest.files[safe_key(path.relative_to(resolved.path).as_posix())] = file_entry(path)
    digest = content_digest(manifest.files)
    prefix = content_key(model_id, resolved.revision, digest)
    manifest_key = f"{prefix}/{MANIFEST_NAME}"
    previous = Manifest.from_json(store.read_json(manifest_key, {"model_id": model_id, "revision": "", "files": {}}))

    total = manifest.total_bytes
    done_bytes = copied = skipped = copied_bytes = 0
    started = time.monotonic()
    put = upload or (lambda st, key, path, sha256: st.upload_file(key, path, sha256=sha256))
    done: dict[str, dict] = {}  # what the folder holds now: the manifest an interrupted run resumes from
    for index, path in enumerate(files, 1):
        rel = safe_key(path.relative_to(resolved.path).as_posix())
        entry = manifest.files[rel]
        unchanged = previous.files.get(rel) == entry and store.exists(f"{prefix}/{rel}")
        if unchanged:
            skipped += 1
            done[rel] = entry
        else:
            try:
                # verified after the copy (re-hashed) before it gets its name: bytes that changed since
                # they were hashed never reach the content folder
                put(store, f"{prefix}/{rel}", path, entry["sha256"])
            except OSError as exc:
                raise StagingError(f"Copying {rel} to {store.child_uri(prefix)} failed: {exc}") from exc
            copied += 1
            copied_bytes += entry["size"]
            done[rel] = entry
            # Record progress as we go so an interrupted run resumes after the last finished file.
            store.write_json(manifest_key, Manifest(model_id, resolved.revision, source, dict(done)).to_json()
                             | {"complete": False})
        done_bytes += entry["size"]
        elapsed = time.monotonic() - started
        rate = copied_bytes / elapsed if elapsed > 0 else 0.0
        eta = (total - done_bytes) / rate if rate > 0 else 0.0
        progress(
            f"staging {index}/{len(files)} files, {_fmt_bytes(done_bytes)}/{_fmt_bytes(total)}, "
            f"{rate / 1e6:.1f} MB/s, {elapsed:.1f}s elapsed, ~{eta:.0f}s left ({rel}: "
            f"{'unchanged, skipped' if unchanged else 'copied'})"
        )
    if isinstance(store, LocalStore):  # nothing but this content in its folder (e.g. files of a crashed run)
        wanted = {f"{prefix}/{rel}" for rel in manifest.files} | {manifest_key}
        for key in [k for k in store.list(prefix) if k not in wanted]:
            log.warning("removing %s: not part of the model with digest %s", key, digest[:16])
            store.delete(key)
    store.write_json(manifest_key, manifest.to_json() | {"complete": True})
    uri = str(store.path(prefix)) if isinstance(store, LocalStore) else store.child_uri(prefix)
    return StagedModel(
        model_id=model_id,
        revision=resolved.revision,
        uri=uri,
        manifest_uri=store.child_uri(manifest_key),
        files=manifest.files,
        copied_files=copied,
        skipped_files=skipped,
        copied_bytes=copied_bytes,
        digest=digest,
    )
