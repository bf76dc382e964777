"""Copy a resolved model folder into an ObjectStore, skipping files the manifest says are already there."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

from raylift.errors import StagingError
from raylift.staging.manifest import MANIFEST_NAME, Manifest, file_entry
from raylift.staging.sources import resolve_source
from raylift.store import LocalStore, ObjectStore, safe_key
from raylift.targets.base import StagedModel

log = logging.getLogger(__name__)
SAFE_NAME_RE = re.compile(r"[^A-Za-z0-9._-]+")


def model_key(model_id: str, revision: str) -> str:
    """``<model>/<revision>`` with characters a path or S3 key should not carry replaced."""
    return safe_key(f"{SAFE_NAME_RE.sub('--', model_id)}/{SAFE_NAME_RE.sub('--', revision)}")


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
    upload: Callable[[ObjectStore, str, Path], None] | None = None,
    progress: Callable[[str], None] = log.info,
) -> StagedModel:
    """Stage ``source`` into ``store`` under ``<model>/<revision>/`` with a manifest.

    A file whose size and sha256 match the manifest already in the store is not copied again, so an
    interrupted or repeated run only moves what is missing. ``upload`` lets cloud stores plug in a
    faster uploader (parallel multipart); the default uses ``store.upload_file``.
    """
    resolved = resolve_source(
        source, revision=revision, cache_dir=cache_dir, aws_conn_id=aws_conn_id, hf_token=hf_token
    )
    prefix = model_key(model_id, resolved.revision)
    manifest_key = f"{prefix}/{MANIFEST_NAME}"
    previous = Manifest.from_json(store.read_json(manifest_key, {"model_id": model_id, "revision": "", "files": {}}))

    # is_file() follows symlinks, which is how hub snapshots point at their blobs. A source that is itself
    # a staged location (a redeploy of a staged model) carries our manifest: bookkeeping, not a model file.
    files = sorted(
        p
        for p in resolved.path.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(resolved.path).parts and p.name != MANIFEST_NAME
    )
    manifest = Manifest(model_id, resolved.revision, source)
    total = sum(p.stat().st_size for p in files)
    done_bytes = copied = skipped = copied_bytes = 0
    started = time.monotonic()
    put = upload or (lambda st, key, path: st.upload_file(key, path))
    for index, path in enumerate(files, 1):
        rel = safe_key(path.relative_to(resolved.path).as_posix())
        entry = file_entry(path)
        manifest.files[rel] = entry
        if previous.files.get(rel) == entry and store.exists(f"{prefix}/{rel}"):
            skipped += 1
        else:
            try:
                put(store, f"{prefix}/{rel}", path)
            except OSError as exc:
                raise StagingError(f"Copying {rel} to {store.child_uri(prefix)} failed: {exc}") from exc
            copied += 1
            copied_bytes += entry["size"]
            # Record progress as we go so an interrupted run resumes after the last finished file.
            store.write_json(manifest_key, manifest.to_json() | {"complete": False})
        done_bytes += entry["size"]
        elapsed = time.monotonic() - started
        rate = copied_bytes / elapsed if elapsed > 0 else 0.0
        eta = (total - done_bytes) / rate if rate > 0 else 0.0
        progress(
            f"staging {index}/{len(files)} files, {_fmt_bytes(done_bytes)}/{_fmt_bytes(total)}, "
            f"{rate / 1e6:.1f} MB/s, {elapsed:.1f}s elapsed, ~{eta:.0f}s left ({rel}: "
            f"{'unchanged, skipped' if previous.files.get(rel) == entry else 'copied'})"
        )
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
    )
