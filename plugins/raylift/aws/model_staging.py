"""Pre-stage a model to ``s3://bucket/prefix/<model>/<revision>/`` so clusters load it from S3, not the hub.

The generic part (sources, manifest, skip-what-matches) is :mod:`raylift.staging`; this module adds
what S3 needs: an identity and bucket check first, parallel multipart uploads with throttling
retries and a storage class, an HTTPS tarball source, and a final verification against S3 itself.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from raylift.aws.identity import caller_identity, check_bucket
from raylift.aws.s3_transfer import S3Uploader, TransferSettings
from raylift.aws.tarball import fetch_tarball, is_tarball_url
from raylift.errors import ModelSourceError
from raylift.staging.manifest import MANIFEST_NAME
from raylift.staging.sources import HUB_REPO_RE, resolve_source
from raylift.staging.stage import model_key, stage_model
from raylift.store import ObjectStore, S3Store, safe_key
from raylift.targets.base import StagedModel

log = logging.getLogger(__name__)


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
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(hf_conn_id).password or None


def resolve(
    source: str, revision: str | None, cache_dir: Path, *, aws_conn_id: str | None, hf_conn_id: str | None
) -> tuple[Path, str]:
    """A local folder with the model, and its revision. Hub tokens are fetched only if anonymous access fails."""
    if is_tarball_url(source):
        folder, sha = fetch_tarball(source, cache_dir)
        return folder, revision or f"tar-{sha[:12]}"
    if source.startswith("s3://"):  # a clear error for a source bucket that is missing or not readable
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        check_bucket(
            S3Hook(aws_conn_id=aws_conn_id).get_conn(),
            source[5:].split("/", 1)[0],
            role="Model source bucket",
            fix=f"check the 'model_source' param ({source!r}) and that the bucket is in this account/region",
        )
    try:
        found = resolve_source(source, revision=revision, cache_dir=cache_dir, aws_conn_id=aws_conn_id)
    except ModelSourceError:
        if not (hf_conn_id and _is_hub(source)):
            raise
        log.info("Anonymous hub download of %s failed; retrying with the token of connection %s", source, hf_conn_id)
        found = resolve_source(
            source, revision=revision, cache_dir=cache_dir, aws_conn_id=aws_conn_id, hf_token=hub_token(hf_conn_id)
        )
    return found.path, found.revision


def forget_mismatched(store: S3Store, prefix: str, uploader: S3Uploader, full_key: Callable[[str], str]) -> int:
    """Drop manifest entries whose object is missing or differs in S3, so this run uploads them again.

    The generic stager trusts the manifest; S3 objects can be deleted or overwritten behind its back.
    """
    key = f"{prefix}/{MANIFEST_NAME}"
    manifest = store.read_json(key)
    if not manifest or not manifest.get("files"):
        return 0
    stale = []
    for rel, entry in manifest["files"].items():
        remote = uploader.head(full_key(f"{prefix}/{rel}"))
        if remote is None or remote.size != int(entry["size"]) or remote.sha256 not in (None, entry["sha256"]):
            stale.append(rel)
    if stale:
        log.warning("%d staged file(s) are missing or changed in S3 and will be uploaded again: %s", len(stale), stale[:5])
        for rel in stale:
            del manifest["files"][rel]
        store.write_json(key, manifest | {"complete": False})
    return len(stale)


def stage_model_to_s3(
    *,
    source: str,
    model_id: str,
    destination: S3Destination,
    cache_dir: Path,
    revision: str | None = None,
    hf_conn_id: str | None = None,
    settings: TransferSettings | None = None,
) -> StagedModel:
    """Check identity and bucket, resolve ``source``, upload what changed, verify it all in S3."""
    caller_identity(destination.aws_conn_id, destination.region_name)
    uploader = S3Uploader(
        destination.bucket,
        aws_conn_id=destination.aws_conn_id,
        region_name=destination.region_name,
        storage_class=destination.storage_class,
        settings=settings,
    )
    check_bucket(uploader.client, destination.bucket)
    folder, resolved_revision = resolve(
        source, revision, cache_dir, aws_conn_id=destination.aws_conn_id, hf_conn_id=hf_conn_id
    )
    store = S3Store(destination.uri, aws_conn_id=destination.aws_conn_id)

    def full_key(key: str) -> str:
        return f"{store.prefix}/{safe_key(key)}" if store.prefix else safe_key(key)

    def upload(_store: ObjectStore, key: str, path: Path) -> None:
        uploader.upload(path, full_key(key))

    forget_mismatched(store, model_key(model_id, resolved_revision), uploader, full_key)
    files = [p for p in folder.rglob("*") if p.is_file()]
    uploader.start(sum(p.stat().st_size for p in files), len(files))
    # The folder (not the original URL) is passed on, so no presigned query string reaches the manifest.
    staged = stage_model(
        str(folder),
        store,
        model_id=model_id,
        revision=resolved_revision,
        cache_dir=cache_dir,
        aws_conn_id=destination.aws_conn_id,
        upload=upload,
    )
    prefix = staged.uri.removeprefix(f"s3://{destination.bucket}/")
    uploader.verify({f"{prefix}/{rel}": entry for rel, entry in staged.files.items()})
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
