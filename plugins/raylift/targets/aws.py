"""What the ``ecs`` and ``eks`` targets share: image builds (CodeBuild -> ECR), the serve-app zip in S3,
model staging to S3, and where state lives. Options are plain JSON values (the DAG's ``target_options``), validated
by ``AwsOptions`` and each target's model built on it."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import Field, field_validator

from raylift.artifact import PackageInputs, build_package
from raylift.aws.content import (
    ARM64,
    RUNTIME_LOCK,
    dockerfile_path,
    image_content_digest,
    image_platform,
    image_tag,
    upload_build_context,
)
from raylift.aws.model_staging import S3Destination, stage_model_to_s3
from raylift.aws.staging_job import StagingLaunch, StagingRequest, read_record
from raylift.config import SERVE_APPS_DIR_NAME, local_settings, repo_root
from raylift.errors import RayliftValueError, StagingError
from raylift.records import Artifact, StagedModel
from raylift.targets.base import Target
from raylift.targets.options import TargetOptions
from raylift.targets.staging_request import check_remote_source

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger

log = logging.getLogger(__name__)


# An ECR repository name (what ``ecr_repository`` takes), as ECR defines it: no registry host, no tag.
ECR_REPOSITORY_NAME = re.compile(r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$")

PositiveSeconds = Annotated[float, Field(gt=0)]
# Where the model copy runs: beside the cluster (an ECS task / a Kubernetes Job), or in the Airflow task itself.
STAGING_MODES = ("remote", "in_worker")


class AwsOptions(TargetOptions):
    """Options every AWS target takes; ``ecs`` and ``eks`` extend it with their own.

    One spelling per key: the terraform stacks' names (``region``, ``image_repository``, ``model_store_uri``)
    are refused with raylift's name, which tools/tf_outputs_to_airflow.py prints."""

    RENAMED: ClassVar[dict[str, tuple[str, ...]]] = {
        "region": ("region_name",),
        "image_repository": ("ecr_repository",),
        "model_store_uri": ("bucket", "model_prefix"),
    }

    bucket: str = Field(description="the S3 bucket of models, state and artifacts (a name, not s3://...)")
    aws_conn_id: str | None = "aws_default"
    region_name: str | None = Field(None, min_length=1)
    model_prefix: str = "models"
    state_prefix: str = "raylift"
    artifacts_prefix: str = "artifacts"
    storage_class: str | None = None
    hf_conn_id: str | None = None
    ecr_repository: str = "ray-vllm"
    # images/<image_name>/Dockerfile; None: the image follows the Serve config's profile (raylift.aws.images)
    image_name: str | None = Field(None, min_length=1)
    codebuild_project: str = Field("raylift-image", min_length=1)
    codebuild_project_arm64: str | None = None  # arm64 images (None: "<codebuild_project>-arm64", as terraform names it)
    build_context_prefix: str = "build-context"  # terraform image_pipeline's source_prefix
    build_poll_interval_s: PositiveSeconds = 15.0
    build_timeout_s: PositiveSeconds = 3600.0
    # Model staging (raylift.targets.staging_request): "remote" runs the copy beside the cluster, so the model
    # never passes through the Airflow worker's disk; "in_worker" keeps the copy inside the Airflow task.
    staging: str = "remote"
    staging_task_definition: str = Field("raylift-model-staging", min_length=1)  # ecs: terraform's staging.tf
    staging_container: str = Field("stage", min_length=1)  # ecs: the container whose command is overridden
    staging_image: str | None = Field(None, min_length=1)  # eks: an image with raylift (images/airflow, in ECR)
    staging_service_account: str = Field("raylift-model-staging", min_length=1)  # eks: Pod Identity's
    staging_scratch_size: str = Field("200Gi", pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)$")  # eks: the emptyDir's sizeLimit
    staging_timeout_s: PositiveSeconds = 7200.0
    staging_poll_interval_s: PositiveSeconds = 15.0

    @field_validator("staging")
    @classmethod
    def _staging_mode(cls, value: str) -> str:
        if value not in STAGING_MODES:
            raise ValueError(
                f"target option 'staging' got {value!r}: use one of {list(STAGING_MODES)} ('remote': an ECS task or "
                "a Kubernetes Job beside the cluster copies the model; 'in_worker': the Airflow task copies it)."
            )
        return value

    @field_validator("bucket")
    @classmethod
    def _bucket_name(cls, value: str) -> str:
        if not value or "/" in value or value.startswith("s3:"):  # a name: no s3:// URI, no prefix
            raise ValueError(f"target option 'bucket' must be a bucket name, got {value!r}.")
        return value

    @field_validator("ecr_repository")
    @classmethod
    def _repository_name(cls, value: str) -> str:
        if ".dkr.ecr." in value or not ECR_REPOSITORY_NAME.match(value):  # a registry host: a URL
            raise ValueError(
                f"target option 'ecr_repository' must be an ECR repository name (e.g. 'raylift-ray-vllm'), got "
                f"{value!r}: not its URL (tools/tf_outputs_to_airflow.py takes the name from the stack's URL)."
            )
        return value


@dataclass(frozen=True)
class ImageBuild:
    """The artifact, and the CodeBuild build still producing its image (None when reused)."""

    artifact: Artifact
    build_id: str | None


class AwsTarget(Target):
    """Base for ``ecs`` and ``eks``: everything but the cluster itself."""

    def __init__(self, aws: AwsOptions, root: Path | None = None) -> None:
        self.aws = aws
        self.root = root or repo_root()

    # -- image -----------------------------------------------------------------------------------
    def choose_image(self, profile: str, config: dict[str, Any], *, known: bool = True) -> str:
        """The image for Serve config ``profile`` (``raylift.aws.images``: GPU, Neuron, Graviton or CPU), the target
        option ``image_name`` when it names one that runs it; built and deployed by this target from now on."""
        from raylift.aws.images import choose_image

        self.chosen_image = choose_image(
            profile, config, root=self.root, where=self.describe_cluster(), explicit=self.aws.image_name,
            release=self.release_image, known=known,
        )
        return self.chosen_image

    @property
    def image_name(self) -> str:
        """The image (``images/<name>``) this step builds or deploys: the one chosen for the profile here or by the
        release's first step, else the target option ``image_name``, else ``raylift.aws.images.DEFAULT_IMAGE``."""
        from raylift.aws.images import DEFAULT_IMAGE

        return self.chosen_image or self.release_image or self.aws.image_name or DEFAULT_IMAGE

    # -- stores ----------------------------------------------------------------------------------
    def model_store_uri(self) -> str:
        return f"s3://{self.aws.bucket}/{self.aws.model_prefix.strip('/')}"

    def state_uri(self) -> str:
        return f"s3://{self.aws.bucket}/{self.aws.state_prefix.strip('/')}"

    def s3_write_locations(self) -> dict[str, str]:
        """Where this target writes (``BucketWriter``): the model store, the release state and lease, the packaged
        artifacts and the image build's context, each a prefix of ``bucket``."""
        bucket = f"s3://{self.aws.bucket}"
        return {"bucket + model_prefix": self.model_store_uri(), "bucket + state_prefix": self.state_uri(),
                "bucket + artifacts_prefix": f"{bucket}/{self.aws.artifacts_prefix.strip('/')}",
                "bucket + build_context_prefix": f"{bucket}/{self.aws.build_context_prefix.strip('/')}"}

    def state_store(self) -> Any:
        """One store (one S3Hook, one boto3 client) per target: the hook's client is built once, as the Amazon
        provider caches it (``AwsBaseHook.conn``), instead of once per record read or written (each build costs a
        botocore client and the provider's user-agent stack walk: 0.3–0.6 s, 113 of them in one blue/green test)."""
        from raylift.store import open_store

        uri = self.state_uri()
        cached = self.__dict__.get("_state_store")
        if cached is None or cached[0] != (uri, self.aws.aws_conn_id):
            cached = ((uri, self.aws.aws_conn_id), open_store(uri, aws_conn_id=self.aws.aws_conn_id))
            self.__dict__["_state_store"] = cached
        return cached[1]

    def aws_region(self) -> str | None:
        return self.aws.region_name

    # -- model -----------------------------------------------------------------------------------
    @property
    def stages_remotely(self) -> bool:
        """The model copy runs beside the cluster (target option ``staging``: ``remote``, the default)."""
        return self.aws.staging == "remote"

    def start_staging(
        self, *, source: str, model_id: str, revision: str | None, request_id: str, **patterns: Any
    ) -> tuple[StagingLaunch, BaseTrigger]:
        """Launch the remote copy (an ECS task or a Kubernetes Job, by target) and return it with the trigger to
        defer on; ``finish_staging`` reads what it staged. Refused before anything starts when the source cannot
        travel (a local path, a URL with a query string)."""
        request = self.staging_request(source=source, model_id=model_id, revision=revision,
                                       request_id=request_id, **patterns)
        started = self.launch_staging(request)
        log.info("staging %s on %s as %s (record: %s)", request.source, started.runner, started.handle,
                 request.record_uri)
        return started, self.staging_trigger(started)

    def staging_request(
        self, *, source: str, model_id: str, revision: str | None, request_id: str,
        allow_patterns: list[str] | None = None, ignore_patterns: list[str] | None = None,
    ) -> StagingRequest:
        """The request for this target's model store, its record under the state prefix."""
        check_remote_source(source)
        if self.aws.hf_conn_id:
            log.warning(
                "hf_conn_id %s is not passed to the remote staging task (no credential travels in its command): a "
                "gated model needs HF_TOKEN in the task's secrets (staging.tf's hf_token_secret_arn / the target "
                "option hf_token_secret on eks), or the target option 'staging': 'in_worker'", self.aws.hf_conn_id,
            )
        return StagingRequest(
            source=source, model_id=model_id, revision=revision, bucket=self.aws.bucket,
            prefix=self.aws.model_prefix.strip("/"),
            record_key=f"{self.aws.state_prefix.strip('/')}/staging/{request_id}.json",
            region_name=self.aws.region_name, storage_class=self.aws.storage_class,
            allow_patterns=allow_patterns, ignore_patterns=ignore_patterns,
        )

    # What a target that stages remotely supplies (``raylift.targets.ecs_staging``, ``raylift.targets.eks_staging``):
    # where the copy starts, the trigger that fires when it has ended, the same wait in-process, and where its logs are.
    def launch_staging(self, request: StagingRequest) -> StagingLaunch:
        """Start the copy where this target's cluster runs; the launch, for XCom."""
        raise RayliftValueError(f"target {self.name!r} has no remote staging: set 'staging' to 'in_worker'.")

    def staging_trigger(self, launch: StagingLaunch) -> BaseTrigger:
        """The trigger that fires when the task/Job has ended."""
        raise RayliftValueError(f"target {self.name!r} has no remote staging: set 'staging' to 'in_worker'.")

    def wait_for_staging(self, launch: StagingLaunch) -> dict[str, Any]:
        """The trigger's wait, blocking in this process (a task that does not defer); returns its event."""
        raise RayliftValueError(f"target {self.name!r} has no remote staging: set 'staging' to 'in_worker'.")

    def staging_where(self, launch: StagingLaunch) -> str:
        """The task/Job, and where its logs are, for messages."""
        raise RayliftValueError(f"target {self.name!r} has no remote staging: set 'staging' to 'in_worker'.")

    def finish_staging(self, launch: StagingLaunch, event: dict[str, Any]) -> StagedModel:
        """The StagedModel the remote run wrote, once its task/Job has ended; StagingError naming the exit code,
        the reason and what to do when it failed.

        A stopped task whose container exited non-zero failed, whatever it wrote; otherwise the record decides: the
        stager writes it last, after verifying every object in S3, so no record means the copy did not finish."""
        where = self.staging_where(launch)
        if event.get("status") != "success":
            code = f" (exit code {event['exit_code']})" if event.get("exit_code") is not None else ""
            ended = event.get("message") or f"{where} ended {event.get('status')}"
            raise StagingError(
                f"{ended}{code}. Read {where}; fix the source or the task's access, then run the step again (a re-run "
                "copies only what is missing), or set the target option 'staging' to 'in_worker'."
            )
        exit_code = event.get("exit_code")
        how = ", ".join(str(v) for v in (event.get("stop_code"), event.get("stopped_reason"),
                                         event.get("container_reason")) if v)
        if exit_code not in (None, 0):
            raise StagingError(
                f"{where} exited with code {exit_code}{f' ({how})' if how else ''}: the model was not staged. Read its "
                "logs (exit code 3: the source or the bucket was refused, the message says which; 137: out of memory "
                "or scratch space), fix it and run the step again (a re-run copies only what is missing)."
            )
        staged = read_record(launch.request, aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        if staged is None:
            raise StagingError(
                f"{where} ended{f' ({how})' if how else ''} without writing its record {launch.request.record_uri}: it "
                "did not finish (it never started, was stopped, or failed before the end). Read its logs and run the "
                "step again (a re-run copies only what is missing)."
            )
        return staged

    def stage_model(self, *, source: str, model_id: str, revision: str | None = None, **patterns: Any) -> StagedModel:
        """Stage in this process (``staging: in_worker``, or a caller outside the DAG): the model passes through
        this host's disk (``$RAYLIFT_HOME/cache``)."""
        return stage_model_to_s3(
            **patterns,  # allow_patterns / ignore_patterns (hub sources)
            source=source,
            model_id=model_id,
            revision=revision,
            destination=S3Destination(
                self.aws.bucket,
                self.aws.model_prefix,
                aws_conn_id=self.aws.aws_conn_id,
                region_name=self.aws.region_name,
                storage_class=self.aws.storage_class,
            ),
            cache_dir=local_settings().home / "cache",
            hf_conn_id=self.aws.hf_conn_id,
        )

    # -- metrics ---------------------------------------------------------------------------------
    def publish_benchmark(self, result: dict[str, Any], *, model: str, run_id: str) -> list[str]:
        """The benchmark's figures as CloudWatch metrics (namespace raylift; dims Model, Target, RunId), which
        the terraform dashboard (modules/dashboard) shows run after run."""
        from raylift.hooks.cloudwatch import BenchmarkMetricsHook

        hook = BenchmarkMetricsHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        return hook.publish_benchmark(result, model=model, target=self.name, run_id=run_id)

    # -- artifact --------------------------------------------------------------------------------
    def image_uri(self) -> str:
        """``<repo uri>:<content tag>`` for the current checkout (what build_artifact builds or reuses)."""
        from raylift.hooks.ecr import EcrImageHook

        repo = EcrImageHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        return f"{repo.repository_uri(self.aws.ecr_repository)}:{image_tag(image_content_digest(self.root, self.image_name))}"

    def _s3_client(self) -> Any:
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        return S3Hook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name).get_conn()

    def upload_working_dir(self, *, force: bool = False) -> str:
        """Zip ``serve_apps/`` (content-addressed) and put it in S3 once; returns its ``s3://`` URI."""
        from airflow.providers.amazon.aws.hooks.s3 import S3Hook

        inputs = PackageInputs(self.root / SERVE_APPS_DIR_NAME, (self.root / RUNTIME_LOCK,))
        path, _digest, _ = build_package(inputs, local_settings().home / "cache" / "aws-artifacts", force=force)
        key = f"{self.aws.artifacts_prefix.strip('/')}/{path.name}"
        s3 = S3Hook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        if force or not s3.check_for_key(key, bucket_name=self.aws.bucket):
            s3.load_file(str(path), key=key, bucket_name=self.aws.bucket, replace=True)
            log.info("Uploaded serve-app package to s3://%s/%s", self.aws.bucket, key)
        return f"s3://{self.aws.bucket}/{key}"

    def start_artifact_build(self, *, force: bool = False) -> ImageBuild:
        """Upload the serve-app zip; reuse the image if ECR has its content tag, else start CodeBuild."""
        from raylift.aws.identity import caller_identity, check_bucket
        from raylift.hooks.codebuild import CodeBuildHook
        from raylift.hooks.ecr import EcrImageHook

        image_name = self.image_name
        digest = image_content_digest(self.root, image_name)
        tag = image_tag(digest)
        # Who am I and can I reach the bucket: a clear error now rather than a raw one mid-upload.
        caller_identity(self.aws.aws_conn_id, self.aws.region_name)
        check_bucket(self._s3_client(), self.aws.bucket)
        working_dir = self.upload_working_dir(force=force)
        ecr = EcrImageHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        repo_uri = ecr.repository_uri(self.aws.ecr_repository)
        image = f"{repo_uri}:{tag}"
        if not force and ecr.image_tag_exists(self.aws.ecr_repository, tag):
            log.info("Image %s (%s) already in ECR: build skipped", image, image_name)
            return ImageBuild(Artifact(digest=digest, working_dir=working_dir, image=image, reused=True), None)
        # the context CodeBuild builds from, at a key named by the same digest as the tag
        source = upload_build_context(
            self._s3_client(), self.root, image_name, bucket=self.aws.bucket,
            prefix=self.aws.build_context_prefix, cache_dir=local_settings().home / "cache" / "build-context",
        )
        platform = image_platform(self.root, image_name)
        project = self.aws.codebuild_project
        if platform == ARM64:  # built natively on the arm64 project (no emulation)
            project = self.aws.codebuild_project_arm64 or f"{project}-arm64"
        build_id = CodeBuildHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name).start_image_build(
            project,
            image_repo_uri=repo_uri,
            image_tag=tag,
            dockerfile=dockerfile_path(image_name),
            build_context=".",
            source_location=source,
            platform=platform,
        )
        return ImageBuild(Artifact(digest=digest, working_dir=working_dir, image=image, reused=False), build_id)

    def build_trigger(self, build: ImageBuild) -> Any:
        """For a deferrable build step: a trigger that fires when the CodeBuild build ends."""
        from raylift.triggers.base import attempts_for
        from raylift.triggers.codebuild import CodeBuildBuildTrigger

        if build.build_id is None:
            raise RayliftValueError("Nothing to wait for: the image was reused.")
        return CodeBuildBuildTrigger(
            build.build_id,
            build.artifact.image or "",
            waiter_delay=self.aws.build_poll_interval_s,
            waiter_max_attempts=attempts_for(self.aws.build_timeout_s, self.aws.build_poll_interval_s),
            aws_conn_id=self.aws.aws_conn_id,
            region_name=self.aws.region_name,
        )

    def start_build(self, *, force: bool = False) -> tuple[Artifact, BaseTrigger | None]:
        """The artifact, and the CodeBuild trigger to defer on while its image is built (None: reused)."""
        build = self.start_artifact_build(force=force)
        if build.build_id is None:
            return self.finish_build(build.artifact), None
        return build.artifact, self.build_trigger(build)

    def build_artifact(self, *, force: bool = False) -> Artifact:
        """Build (or reuse) the image and wait in-process; deferrable callers use start_build + finish_build."""
        from raylift.hooks.codebuild import CodeBuildHook
        from raylift.triggers.base import attempts_for

        build = self.start_artifact_build(force=force)
        if build.build_id is not None:  # the trigger's waiter, polled in-process
            CodeBuildHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name).wait_for_build(
                build.build_id,
                waiter_delay=self.aws.build_poll_interval_s,
                waiter_max_attempts=attempts_for(self.aws.build_timeout_s, self.aws.build_poll_interval_s),
            )
        return self.finish_build(build.artifact)
