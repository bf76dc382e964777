"""Remote model staging: the command an ECS task or a Kubernetes Job runs, and the record it leaves in S3.

Why: staging inside the Airflow task moves the whole model through the worker's disk (20 GB on MWAA's workers);
the S3 write-up (seed 003) stages from a Kubernetes Job with an ``emptyDir`` scratch volume and a Pod Identity role
instead. Here the copy runs beside the cluster, as ``python -m raylift.aws.staging_job --source ... --bucket ...``
in raylift's own image (``images/airflow``: the one image with raylift, the Amazon provider and huggingface_hub),
and does exactly what the in-worker step does (:func:`raylift.aws.model_staging.stage_model_to_s3`:
content-addressed, checksum-skipping, verified in S3).

The command carries only what to stage and where, never a credential: S3 is reached with the task's or pod's own
role (the AWS default chain: ECS task role, EKS Pod Identity), a gated hub model with ``HF_TOKEN`` from the
task's or pod's secret. When it is done it writes the :class:`~raylift.records.StagedModel` as JSON at
``record_key`` (a key the operator chose before launching), which is how the waiting operator learns what was
staged: ``read_record`` reads it back and checks it against the manifest the copy wrote.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from raylift.errors import RayliftError, StagingError
from raylift.records import StagedModel

log = logging.getLogger(__name__)

MODULE = "raylift.aws.staging_job"
DEFAULT_CACHE_DIR = "/scratch"  # the task's ephemeral storage / the Job's emptyDir: what the copy passes through
EXIT_STAGING_FAILED = 3  # a RayliftError (bad source, bucket refused): the message says what to fix
EXIT_BAD_ARGS = 2  # argparse's own


@dataclass(frozen=True)
class StagingRequest:
    """What one remote staging run stages, and where it reports. Plain JSON (it travels through XCom and the
    trigger's kwargs) and free of credentials by construction: no field can hold one."""

    source: str
    model_id: str
    bucket: str
    prefix: str
    record_key: str  # s3://bucket/<record_key>: the StagedModel JSON the run writes when done
    revision: str | None = None
    region_name: str | None = None
    storage_class: str | None = None
    allow_patterns: list[str] | None = None
    ignore_patterns: list[str] | None = None
    cache_dir: str = DEFAULT_CACHE_DIR

    @property
    def record_uri(self) -> str:
        return f"s3://{self.bucket}/{self.record_key}"

    def args(self) -> list[str]:
        """The entry point's arguments (``from_args`` reads them back: one definition of the command line)."""
        argv = ["--source", self.source, "--model-id", self.model_id, "--bucket", self.bucket,
                "--prefix", self.prefix, "--record-key", self.record_key, "--cache-dir", self.cache_dir]
        for flag, value in (("--revision", self.revision), ("--region", self.region_name),
                            ("--storage-class", self.storage_class)):
            if value:
                argv += [flag, value]
        # "--allow-pattern=*.json": a glob may start with "-", which argparse would take for a flag
        argv += [f"--allow-pattern={p}" for p in self.allow_patterns or []]
        if self.ignore_patterns is not None:  # [] (take everything) differs from None (skip duplicate formats)
            argv += ["--ignore-patterns-given"] + [f"--ignore-pattern={p}" for p in self.ignore_patterns]
        return argv

    def command(self) -> list[str]:
        """The container's whole command: the image's Python running this module."""
        return ["python", "-m", MODULE, *self.args()]

    @classmethod
    def from_args(cls, argv: Sequence[str]) -> StagingRequest:
        parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description="Stage a model to S3 (raylift).")
        parser.add_argument("--source", required=True)
        parser.add_argument("--model-id", required=True)
        parser.add_argument("--bucket", required=True)
        parser.add_argument("--prefix", required=True)
        parser.add_argument("--record-key", required=True)
        parser.add_argument("--cache-dir", default=DEFAULT_CACHE_DIR)
        parser.add_argument("--revision")
        parser.add_argument("--region")
        parser.add_argument("--storage-class")
        parser.add_argument("--allow-pattern", action="append")
        parser.add_argument("--ignore-pattern", action="append")
        parser.add_argument("--ignore-patterns-given", action="store_true")
        ns = parser.parse_args(list(argv))
        return cls(
            source=ns.source, model_id=ns.model_id, bucket=ns.bucket, prefix=ns.prefix, record_key=ns.record_key,
            revision=ns.revision, region_name=ns.region, storage_class=ns.storage_class,
            allow_patterns=ns.allow_pattern,
            ignore_patterns=(ns.ignore_pattern or []) if ns.ignore_patterns_given else None,
            cache_dir=ns.cache_dir,
        )

    def to_xcom(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_xcom(cls, data: dict[str, Any]) -> StagingRequest:
        return cls(**data)


@dataclass(frozen=True)
class StagingLaunch:
    """A remote staging run that was started: the request, where it runs (``runner``: ``ecs`` or ``eks``), its
    handle there (task ARN or Job name) and the container it runs in, for messages and for reading it back."""

    request: StagingRequest
    runner: str
    handle: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_xcom(self) -> dict[str, Any]:
        return {"request": self.request.to_xcom(), "runner": self.runner, "handle": self.handle,
                "details": dict(self.details)}

    @classmethod
    def from_xcom(cls, data: dict[str, Any]) -> StagingLaunch:
        return cls(StagingRequest.from_xcom(data["request"]), data["runner"], data["handle"],
                   dict(data.get("details") or {}))


def stage(request: StagingRequest) -> StagedModel:
    """Stage as the in-worker step does, with the default AWS credential chain (the task's or pod's role), then
    write the record. The hub token, if any, is the environment's ``HF_TOKEN`` (huggingface_hub reads it)."""
    from raylift.aws.model_staging import S3Destination, stage_model_to_s3
    from raylift.aws.s3_transfer import S3Uploader

    staged = stage_model_to_s3(
        source=request.source,
        model_id=request.model_id,
        revision=request.revision,
        destination=S3Destination(request.bucket, request.prefix, aws_conn_id=None, region_name=request.region_name,
                                  storage_class=request.storage_class),
        cache_dir=Path(request.cache_dir),
        allow_patterns=request.allow_patterns,
        ignore_patterns=request.ignore_patterns,
    )
    S3Uploader(request.bucket, aws_conn_id=None, region_name=request.region_name).write_json(
        request.record_key, staged.to_xcom()
    )
    log.info("wrote the staging record to %s", request.record_uri)
    return staged


def read_record(request: StagingRequest, *, aws_conn_id: str | None, region_name: str | None) -> StagedModel | None:
    """The StagedModel the remote run wrote, checked against the manifest it names (complete, the same files and
    digest), or None when no record was written (the run failed before the end). StagingError when they differ."""
    from raylift.aws.s3_transfer import S3Uploader
    from raylift.manifest import MANIFEST_NAME

    uploader = S3Uploader(request.bucket, aws_conn_id=aws_conn_id, region_name=region_name)
    data = uploader.read_json(request.record_key)
    if data is None:
        return None
    staged = StagedModel.from_xcom(data)
    prefix = f"s3://{request.bucket}/"
    if not staged.manifest_uri.startswith(prefix) or not staged.manifest_uri.endswith(f"/{MANIFEST_NAME}"):
        raise StagingError(f"The staging record {request.record_uri} names a manifest outside the bucket: "
                           f"{staged.manifest_uri!r}. Stage again.")
    manifest = uploader.read_json(staged.manifest_uri[len(prefix):]) or {}
    if not manifest.get("complete") or manifest.get("files") != staged.files:
        raise StagingError(
            f"The staging record {request.record_uri} does not match the manifest {staged.manifest_uri} "
            f"(complete={manifest.get('complete')}): another run may have changed it. Stage again."
        )
    return staged


def main(argv: Sequence[str] | None = None) -> int:
    """The container's entry point: exit 0 with the record written, 3 with a message naming what to fix."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    request = StagingRequest.from_args(sys.argv[1:] if argv is None else argv)
    try:
        staged = stage(request)
    except RayliftError as exc:
        log.error("staging %s failed: %s", request.source, exc)
        return EXIT_STAGING_FAILED
    print(json.dumps({"staged": staged.uri, "record": request.record_uri, "copied_files": staged.copied_files,
                      "skipped_files": staged.skipped_files, "copied_bytes": staged.copied_bytes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
