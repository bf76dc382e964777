"""Model staging off the Airflow worker: launch the copy beside the cluster, wait for it, read what it staged.

Why: staging inside the Airflow task moves every byte of the model through the worker (MWAA's workers have about
20 GB of disk; the seed-003 write-up stages a 7B model from a Kubernetes Job instead). On the ``ecs`` target the
copy is a one-off task of the staging task definition terraform creates (``terraform/modules/ecs_ray/staging.tf``:
Fargate, 200 GiB ephemeral storage, a task role that may write the model bucket); on ``eks`` a ``batch/v1`` Job
(``emptyDir`` scratch, the service account EKS Pod Identity binds to a role that may write the bucket,
``terraform/modules/eks_ray/staging.tf``). Both run ``python -m raylift.aws.staging_job`` (raylift's own stager, so
the layout, manifest and checksum-skipping are the in-worker step's) with arguments only; the Airflow task defers
while it runs and then reads the record it wrote to S3 (``raylift.aws.staging_job.read_record``).

The ECS/EKS specifics live here, fed by the targets' options and their existing clients (the ECS cluster and head
service, the Kubernetes hook the EKS target builds), so ``targets/ecs.py`` and ``targets/eks.py`` stay as they are.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raylift.aws.staging_job import StagingLaunch, StagingRequest, read_record
from raylift.aws.tarball import is_tarball_url
from raylift.errors import RayliftValueError, StagingError
from raylift.records import StagedModel
from raylift.staging.sources import HUB_REPO_RE
from raylift.triggers.base import attempts_for

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger

    from raylift.targets.aws import AwsTarget

log = logging.getLogger(__name__)
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


def staging_request(
    target: AwsTarget, *, source: str, model_id: str, revision: str | None, request_id: str,
    allow_patterns: list[str] | None = None, ignore_patterns: list[str] | None = None,
) -> StagingRequest:
    """The request for ``target``'s model store, its record under the state prefix."""
    check_remote_source(source)
    if target.aws.hf_conn_id:
        log.warning(
            "hf_conn_id %s is not passed to the remote staging task (no credential travels in its command): a gated "
            "model needs HF_TOKEN in the task's secrets (staging.tf's hf_token_secret_arn / the target option "
            "hf_token_secret on eks), or the target option 'staging': 'in_worker'", target.aws.hf_conn_id,
        )
    return StagingRequest(
        source=source, model_id=model_id, revision=revision, bucket=target.aws.bucket,
        prefix=target.aws.model_prefix.strip("/"),
        record_key=f"{target.aws.state_prefix.strip('/')}/staging/{request_id}.json",
        region_name=target.aws.region_name, storage_class=target.aws.storage_class,
        allow_patterns=allow_patterns, ignore_patterns=ignore_patterns,
    )


def launch(target: AwsTarget, request: StagingRequest) -> tuple[StagingLaunch, BaseTrigger]:
    """Start the copy where ``target``'s cluster runs; the launch (for XCom) and the trigger to defer on."""
    if target.name == "ecs":
        started = _launch_ecs(target, request)
    elif target.name == "eks":
        started = _launch_eks(target, request)
    else:
        raise RayliftValueError(f"target {target.name!r} has no remote staging: set 'staging' to 'in_worker'.")
    log.info("staging %s on %s as %s (record: %s)", request.source, started.runner, started.handle, request.record_uri)
    return started, trigger_for(target, started)


# -- ECS ----------------------------------------------------------------------------------------------------------
def _ecs_hook(target: AwsTarget) -> Any:
    from raylift.hooks.ecs_staging import EcsStagingHook

    return EcsStagingHook(aws_conn_id=target.aws.aws_conn_id, region_name=target.aws.region_name)


def _launch_ecs(target: AwsTarget, request: StagingRequest) -> StagingLaunch:
    cluster, head_service = target.cluster, target.head_service  # type: ignore[attr-defined]  # EcsTarget's
    arn = _ecs_hook(target).run_staging_task(
        cluster=cluster, task_definition=target.aws.staging_task_definition, container=target.aws.staging_container,
        command=request.command(), head_service=head_service,
        tags={"raylift:model": request.model_id[:256], "raylift:record": request.record_key[:256]},
    )
    return StagingLaunch(request, "ecs", arn, {"cluster": cluster, "container": target.aws.staging_container})


# -- EKS ----------------------------------------------------------------------------------------------------------
def _launch_eks(target: AwsTarget, request: StagingRequest) -> StagingLaunch:
    from raylift.staging.k8s_job import job_name, render_staging_job

    image = target.aws.staging_image
    if not image:
        raise RayliftValueError(
            "target option 'staging_image' is needed for staging on eks: an image with raylift (images/airflow, "
            "pushed to ECR), which the staging Job runs; or set 'staging' to 'in_worker'."
        )
    namespace: str = target.namespace  # type: ignore[attr-defined]  # EksTarget's
    name = job_name(Path(request.record_key).stem)
    manifest = render_staging_job(
        name=name, namespace=namespace, image=image, command=request.command(),
        service_account=target.aws.staging_service_account, scratch_size=target.aws.staging_scratch_size,
        cache_dir=request.cache_dir, deadline_s=int(target.aws.staging_timeout_s),
        hf_token_secret=target.hf_token_secret,  # type: ignore[attr-defined]  # EksTarget's
    )
    hook = target._kuberay()  # type: ignore[attr-defined]  # the EKS target's Kubernetes client (conn or EKS token)
    _create_job(hook, manifest)
    return StagingLaunch(request, "eks", name, {"namespace": namespace})


def _create_job(hook: Any, manifest: dict[str, Any]) -> None:
    """POST the Job; a refusal names the API's reason (RBAC, quota, a field) and what to do."""
    from kubernetes.client.exceptions import ApiException

    meta = manifest["metadata"]
    try:
        hook.batch_v1_client.create_namespaced_job(namespace=meta["namespace"], body=manifest)
    except ApiException as err:
        from raylift.hooks.kuberay import _api_message

        raise StagingError(
            f"Kubernetes refused staging Job {meta['namespace']}/{meta['name']}: HTTP {err.status}: "
            f"{_api_message(err)}. Check that terraform's eks_ray staging.tf is applied (its Role lets Airflow create "
            "Jobs; its service account exists), or set the target option 'staging' to 'in_worker'."
        ) from None


# -- waiting and reading the result ---------------------------------------------------------------------------------
def trigger_for(target: AwsTarget, started: StagingLaunch) -> BaseTrigger:
    """The trigger that fires when the task/Job has ended."""
    opts = target.aws
    if started.runner == "ecs":
        from raylift.triggers.ecs_staging import EcsStagingTaskTrigger

        return EcsStagingTaskTrigger(
            started.details["cluster"], started.handle, started.details["container"],
            waiter_delay=opts.staging_poll_interval_s,
            waiter_max_attempts=attempts_for(opts.staging_timeout_s, opts.staging_poll_interval_s),
            aws_conn_id=opts.aws_conn_id, region_name=opts.region_name,
        )
    from raylift.triggers.kube_job import KubeJobDoneTrigger

    conn_id = target.kubernetes_conn_id  # type: ignore[attr-defined]  # EksTarget's
    context = None
    if not conn_id:
        from raylift.kuberay.eks_auth import eks_cluster_context

        context = eks_cluster_context(target.cluster_name, target.region(), opts.aws_conn_id)  # type: ignore[attr-defined]
    return KubeJobDoneTrigger(started.handle, started.details["namespace"], kubernetes_conn_id=conn_id,
                              timeout_s=opts.staging_timeout_s, poll_interval_s=opts.staging_poll_interval_s,
                              cluster_context=context)


def wait_in_process(target: AwsTarget, started: StagingLaunch) -> dict[str, Any]:
    """The same wait as the trigger's, blocking here; returns an event of the trigger's shape."""
    if started.runner == "eks":
        trigger = trigger_for(target, started)
        event: dict[str, Any] = trigger.wait()  # type: ignore[attr-defined]  # PollingTrigger.wait
        return event
    from botocore.exceptions import WaiterError

    from raylift.hooks.ecs_staging import task_outcome

    hook, cluster, container = _ecs_hook(target), started.details["cluster"], started.details["container"]
    opts = target.aws
    try:
        hook.wait_for_staging_task(cluster, started.handle, waiter_delay=opts.staging_poll_interval_s,
                                   waiter_max_attempts=attempts_for(opts.staging_timeout_s, opts.staging_poll_interval_s))
    except WaiterError as exc:
        status = "timeout" if "Max attempts exceeded" in str(exc) else "failed"
        return {"status": status, "task_arn": started.handle,
                "message": f"ECS staging task {started.handle} in {cluster!r}: {exc}"}
    outcome = task_outcome(hook.describe_task(cluster, started.handle), container)
    return {"status": "success", "task_arn": started.handle, "exit_code": outcome.exit_code,
            "stop_code": outcome.stop_code, "stopped_reason": outcome.stopped_reason,
            "container_reason": outcome.container_reason}


def _where(started: StagingLaunch) -> str:
    if started.runner == "ecs":
        return (f"ECS staging task {started.handle} (its logs: the staging task definition's log group, "
                "/ecs/<name>-staging)")
    return f"Kubernetes Job {started.details.get('namespace')}/{started.handle} (kubectl logs job/{started.handle})"


def finish(target: AwsTarget, started: StagingLaunch, event: dict[str, Any]) -> StagedModel:
    """The staged record, or StagingError with the task's/Job's exit code and reason and what to do.

    A stopped task whose container exited non-zero failed, whatever it wrote; otherwise the record decides: the
    stager writes it last, after verifying every object in S3, so no record means the copy did not finish."""
    where = _where(started)
    if event.get("status") != "success":
        code = f" (exit code {event['exit_code']})" if event.get("exit_code") is not None else ""
        ended = event.get("message") or f"{where} ended {event.get('status')}"
        raise StagingError(
            f"{ended}{code}. Read {where}; fix the source or the task's access, then run the step again (a re-run "
            "copies only what is missing), or set the target option 'staging' to 'in_worker'."
        )
    exit_code = event.get("exit_code")
    how = ", ".join(str(v) for v in (event.get("stop_code"), event.get("stopped_reason"), event.get("container_reason"))
                    if v)
    if exit_code not in (None, 0):
        raise StagingError(
            f"{where} exited with code {exit_code}{f' ({how})' if how else ''}: the model was not staged. Read its "
            "logs (exit code 3: the source or the bucket was refused, the message says which; 137: out of memory or "
            "scratch space), fix it and run the step again (a re-run copies only what is missing)."
        )
    staged = read_record(started.request, aws_conn_id=target.aws.aws_conn_id, region_name=target.aws.region_name)
    if staged is None:
        raise StagingError(
            f"{where} ended{f' ({how})' if how else ''} without writing its record {started.request.record_uri}: it "
            "did not finish (it never started, was stopped, or failed before the end). Read its logs and run the "
            "step again (a re-run copies only what is missing)."
        )
    return staged
