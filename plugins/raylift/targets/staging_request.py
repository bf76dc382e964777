"""Model staging off the Airflow worker: the runner-independent helpers (the run's id, the source check).

Why: staging inside the Airflow task moves every byte of the model through the worker (MWAA's workers have about
20 GB of disk; the seed-003 write-up stages a 7B model from a Kubernetes Job instead). So on the ``ecs`` and ``eks``
targets the copy runs beside the cluster (an ECS task: ``raylift.targets.ecs_staging``; a Kubernetes Job:
``raylift.targets.eks_staging``). Both run ``python -m raylift.aws.staging_job`` (raylift's own stager, so the
layout, manifest and checksum-skipping are the in-worker step's) with arguments only; the Airflow task defers while
it runs and then reads the record it wrote to S3 (``raylift.aws.staging_job.read_record``).

Where it lives: ``AwsTarget`` (``raylift.targets.aws``) builds the request and reads the record (``start_staging``,
``finish_staging``); each target's staging mixin launches the copy, gives the trigger to defer on and waits
in-process. This module is pure and imports no target, so the targets import it and nothing imports back.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from raylift.aws.tarball import is_tarball_url
from raylift.errors import RayliftValueError
from raylift.staging.sources import HUB_REPO_RE

_ID_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def request_id(*parts: object) -> str:
    """A short id for one staging run (a DAG run's task try): readable prefix + hash, safe in S3 keys and Job names."""
    text = "/".join(str(p) for p in parts)
    return f"{_ID_BAD.sub('-', str(parts[-1]) if parts else 'run')[:20]}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def check_remote_source(source: str) -> None:
    """Refuse a source the remote task cannot reach or must not see: a path on this worker, or a URL whose query
    string (a presigned URL's signature) would travel in the task's command."""
    if source.startswith(("http://", "https://")):
        if "?" in source:
            raise RayliftValueError(
                f"model_source {source.split('?', 1)[0]}?... has a query string (a presigned URL carries its signature "
                "there), which remote staging would put in the task's command: stage it with the target option "
                "'staging': 'in_worker', or copy it to s3:// first."
            )
        if not is_tarball_url(source):
            raise RayliftValueError(f"model_source {source!r} is an URL but not a tarball (.tar, .tar.gz, ...).")
        return
    if source.startswith(("s3://", "hf://")):
        return
    local = source.startswith(("file://", "/", ".", "~")) or Path(source).exists()
    if local or not HUB_REPO_RE.match(source):
        raise RayliftValueError(
            f"model_source {source!r} is a path on the Airflow worker, which the remote staging task cannot read: use "
            "an s3:// prefix, a hub repo id or an https tarball, or set the target option 'staging' to 'in_worker'."
        )
