"""Fast, resumable uploads of model files to S3: parallel multipart, storage class, throttling retries.

Built on the Amazon provider's ``S3Hook`` client with a boto3 ``TransferConfig``; botocore's
``standard`` retry mode backs off on ``503 SlowDown`` and other throttling replies. Every object
carries its sha256 as metadata, so a later run (or :meth:`S3Uploader.verify`) can tell what is there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from raylift.errors import StagingError

log = logging.getLogger(__name__)

MiB = 1024 * 1024
SHA256_METADATA_KEY = "sha256"
STORAGE_CLASSES = frozenset(
    {
        "STANDARD",
        "REDUCED_REDUNDANCY",
        "STANDARD_IA",
        "ONEZONE_IA",
        "INTELLIGENT_TIERING",
        "GLACIER_IR",
        "EXPRESS_ONEZONE",
    }
)


@dataclass(frozen=True)
class TransferSettings:
    """Multipart and retry knobs; defaults suit multi-GB safetensors shards (see bench/staging_throughput.py)."""

    # 8 MiB parts (s3transfer grows them for files that would need more than 10,000), 10 threads
    # shared by all files' parts: measured best of 8-64 MiB x 4-10 in bench/staging_throughput.py.
    multipart_threshold: int = 8 * MiB
    multipart_chunksize: int = 8 * MiB
    max_concurrency: int = 10
    max_attempts: int = 8  # botocore attempts per request, throttling included
    progress_every_s: float = 10.0


class Progress:
    """Thread-safe byte counter for boto3 callbacks: logs files/bytes done, MB/s and ETA."""

    def __init__(self, total_bytes: int, total_files: int, every_s: float, emit: Callable[..., None]) -> None:
        self.total_bytes, self.total_files = total_bytes, total_files
        self.done_bytes = self.done_files = 0
        self.every_s, self.emit = every_s, emit
        self.started = self._last = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, nbytes: int) -> None:
        with self._lock:
            self.done_bytes += nbytes
            now = time.monotonic()
            if now - self._last >= self.every_s:
                self._last = now
                self.report()

    def file_done(self) -> None:
        with self._lock:
            self.done_files += 1
            self.report()

    def report(self) -> None:
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.done_bytes / elapsed
        eta = (self.total_bytes - self.done_bytes) / rate if rate > 0 else float("inf")
        self.emit(
            "uploaded %d/%d files, %.1f/%.1f MB, %.1f MB/s, ETA %s",
            self.done_files,
            self.total_files,
            self.done_bytes / 1e6,
            self.total_bytes / 1e6,
            rate / 1e6,
            f"{eta:.0f}s" if eta != float("inf") else "unknown",
        )


@dataclass(frozen=True)
class UploadJob:
    """One file to upload, with the sha256 that goes into its metadata."""

    path: Path
    key: str
    sha256: str
    rel: str = ""


@dataclass(frozen=True)
class RemoteObject:
    size: int
    sha256: str | None
    storage_class: str


class S3Uploader:
    """Uploads files under ``s3://bucket/`` keys; one instance per staging run."""

    def __init__(
        self,
        bucket: str,
        *,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        storage_class: str | None = None,
        settings: TransferSettings | None = None,
    ) -> None:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        if storage_class and storage_class not in STORAGE_CLASSES:
            raise StagingError(
                f"Unknown S3 storage class {storage_class!r}: use one of {sorted(STORAGE_CLASSES)}."
            )
        self.bucket = bucket
        self.storage_class = storage_class
        self.settings = settings or TransferSettings()
        self.hook = S3Hook(
            aws_conn_id=aws_conn_id,
            region_name=region_name,
            config={"retries": {"mode": "standard", "max_attempts": self.settings.max_attempts}},
        )
        self.progress: Progress | None = None

    @cached_property
    def _session(self) -> Any:
        return self.hook.get_session(region_name=self.hook.region_name)

    def _client(self, service: str) -> Any:
        # One boto3 session for the run's clients: each new session parses botocore's endpoint and
        # service JSON again, which costs more than re-checking an unchanged model.
        endpoint = self.hook.conn_config.get_service_endpoint_url(service_name=service)
        return self._session.client(service, endpoint_url=endpoint, config=self.hook.config, verify=self.hook.verify)

    @cached_property
    def client(self) -> Any:
        """S3 client from the connection (credentials, region, endpoint) with standard retries."""
        return self._client("s3")

    def sts_client(self) -> Any:
        """STS client from the same session (for the caller-identity check)."""
        return self._client("sts")

    def read_json(self, key: str) -> Any:
        """``s3://bucket/key`` as JSON, or None when there is no such object."""
        import json

        from botocore.exceptions import ClientError

        try:
            return json.loads(self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read())
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StagingError(f"Cannot read s3://{self.bucket}/{key}: {exc}") from None

    def write_json(self, key: str, value: Any) -> None:
        import json

        body = json.dumps(value, indent=2, sort_keys=True, default=str).encode()
        self.client.put_object(Bucket=self.bucket, Key=key, Body=body, ContentType="application/json")

    def start(self, total_bytes: int, total_files: int) -> None:
        """Begin a progress report for a run of ``total_files`` files."""
        self.progress = Progress(total_bytes, total_files, self.settings.progress_every_s, log.info)

    def head(self, key: str) -> RemoteObject | None:
        from botocore.exceptions import ClientError

        try:
            reply = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise StagingError(f"Cannot read s3://{self.bucket}/{key}: {exc}") from None
        return RemoteObject(
            size=int(reply["ContentLength"]),
            sha256=reply.get("Metadata", {}).get(SHA256_METADATA_KEY),
            storage_class=reply.get("StorageClass", "STANDARD"),
        )

    def upload_many(self, jobs: Iterable[UploadJob], on_done: Callable[[UploadJob], None]) -> None:
        """Upload ``jobs`` concurrently through one transfer manager: the parts of every file share
        ``max_concurrency`` threads, so small files do not wait behind big ones and big ones are split.

        ``jobs`` may be a generator (e.g. hashing as it goes): each job is submitted as soon as it is
        produced. ``on_done`` runs in this thread as each file finishes. If any upload fails, the rest
        still finish (a re-run then skips them) and StagingError names the first failure.
        """
        import queue

        from boto3.s3.transfer import TransferConfig, create_transfer_manager
        from s3transfer.subscribers import BaseSubscriber

        s = self.settings
        config = TransferConfig(
            multipart_threshold=s.multipart_threshold,
            multipart_chunksize=s.multipart_chunksize,
            max_concurrency=s.max_concurrency,
            use_threads=True,
        )
        finished: queue.Queue[tuple[UploadJob, BaseException | None]] = queue.Queue()
        progress = self.progress

        class Events(BaseSubscriber):
            def __init__(self, job: UploadJob) -> None:
                self.job = job

            def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
                if progress:
                    progress(bytes_transferred)

            def on_done(self, future: Any, **kwargs: Any) -> None:
                try:
                    future.result()
                    finished.put((self.job, None))
                except BaseException as exc:  # reported in the caller's thread
                    finished.put((self.job, exc))

        failures: list[tuple[UploadJob, BaseException]] = []
        pending = 0

        def drain(block: bool) -> None:
            nonlocal pending
            while pending:
                try:
                    job, error = finished.get(block=block)
                except queue.Empty:
                    return
                pending -= 1
                if error is None:
                    if progress:
                        progress.file_done()
                    on_done(job)
                else:
                    failures.append((job, error))

        manager = create_transfer_manager(self.client, config)
        try:
            for job in jobs:
                extra: dict[str, Any] = {"Metadata": {SHA256_METADATA_KEY: job.sha256}}
                if self.storage_class:
                    extra["StorageClass"] = self.storage_class
                manager.upload(str(job.path), self.bucket, job.key, extra_args=extra, subscribers=[Events(job)])
                pending += 1
                drain(block=False)
            drain(block=True)
        finally:
            manager.shutdown()
        if failures:
            job, exc = failures[0]
            others = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
            raise StagingError(
                f"Uploading {job.path.name} to s3://{self.bucket}/{job.key} failed after retries: {exc}{others}. "
                "Re-run the task: files already uploaded are kept and skipped."
            )

    def verify(self, expected: Mapping[str, Mapping[str, Any]]) -> None:
        """Check every ``key -> {size, sha256}`` is in S3 with that size (and sha256 metadata when present)."""
        problems = []
        for key, entry in sorted(expected.items()):
            remote = self.head(key)
            if remote is None:
                problems.append(f"{key}: missing")
            elif remote.size != int(entry["size"]):
                problems.append(f"{key}: size {remote.size} != {entry['size']}")
            elif remote.sha256 is not None and remote.sha256 != entry["sha256"]:
                problems.append(f"{key}: sha256 differs")
        if problems:
            shown = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
            raise StagingError(
                f"Verification of s3://{self.bucket} failed for {len(problems)} file(s): {shown}. "
                "Re-run staging to re-upload them."
            )
