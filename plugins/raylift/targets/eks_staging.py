"""Model staging on the ``eks`` target: a ``batch/v1`` Job copies the model, in the cluster.

The Job (``raylift.staging.k8s_job``) has ``emptyDir`` scratch and runs as the service account EKS Pod Identity
binds to a role that may write the bucket (``terraform/modules/eks_ray/staging.tf``); its command is the request's
(``python -m raylift.aws.staging_job``, arguments only), its image the target option ``staging_image``. Why off the
worker, and what ``AwsTarget`` does around it (the request, reading the record): ``raylift.targets.staging_request``.
"""

from __future__ import annotations

from abc import abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raylift.aws.staging_job import StagingLaunch, StagingRequest
from raylift.errors import RayliftValueError, StagingError

if TYPE_CHECKING:
    from raylift.hooks.kuberay import KubeRayHook
    from raylift.targets.aws import AwsOptions
    from raylift.triggers.kube_job import KubeJobDoneTrigger


class EksStaging:
    """Mixin for ``EksTarget``: the remote-staging steps ``AwsTarget.start_staging`` / ``finish_staging`` call."""

    # -- what the host supplies (``EksTarget``) ----------------------------------------------------------------
    aws: AwsOptions
    cluster_name: str  # the EKS cluster (for a trigger's credentials when no kubernetes_conn_id is set)
    namespace: str  # where the Job runs
    kubernetes_conn_id: str | None
    hf_token_secret: str | None  # the Kubernetes Secret with HF_TOKEN, for gated models

    @abstractmethod
    def region(self) -> str:
        """The cluster's AWS region."""

    @abstractmethod
    def _kuberay(self) -> KubeRayHook:
        """The host's Kubernetes client (its connection, or a token minted for the EKS cluster)."""

    # -- the staging steps -----------------------------------------------------------------------------------
    def launch_staging(self, request: StagingRequest) -> StagingLaunch:
        """Create the staging Job in the target's namespace; the launch carries its name."""
        from raylift.staging.k8s_job import job_name, render_staging_job

        image = self.aws.staging_image
        if not image:
            raise RayliftValueError(
                "target option 'staging_image' is needed for staging on eks: an image with raylift (images/airflow, "
                "pushed to ECR), which the staging Job runs; or set 'staging' to 'in_worker'."
            )
        namespace = self.namespace
        name = job_name(Path(request.record_key).stem)
        manifest = render_staging_job(
            name=name, namespace=namespace, image=image, command=request.command(),
            service_account=self.aws.staging_service_account, scratch_size=self.aws.staging_scratch_size,
            cache_dir=request.cache_dir, deadline_s=int(self.aws.staging_timeout_s),
            hf_token_secret=self.hf_token_secret,
        )
        _create_job(self._kuberay(), manifest)
        return StagingLaunch(request, "eks", name, {"namespace": namespace})

    def staging_trigger(self, launch: StagingLaunch) -> KubeJobDoneTrigger:
        """The trigger that fires when the Job has ended."""
        from raylift.triggers.kube_job import KubeJobDoneTrigger

        opts = self.aws
        conn_id = self.kubernetes_conn_id
        context = None
        if not conn_id:
            from raylift.kuberay.eks_auth import eks_cluster_context

            context = eks_cluster_context(self.cluster_name, self.region(), opts.aws_conn_id)
        return KubeJobDoneTrigger(launch.handle, launch.details["namespace"], kubernetes_conn_id=conn_id,
                                  timeout_s=opts.staging_timeout_s, poll_interval_s=opts.staging_poll_interval_s,
                                  cluster_context=context)

    def wait_for_staging(self, launch: StagingLaunch) -> dict[str, Any]:
        """The trigger's own wait, blocking here; returns its event."""
        return self.staging_trigger(launch).wait()

    def staging_where(self, launch: StagingLaunch) -> str:
        """The Job, and how to read its logs, for messages."""
        return f"Kubernetes Job {launch.details.get('namespace')}/{launch.handle} (kubectl logs job/{launch.handle})"


def _create_job(hook: KubeRayHook, manifest: dict[str, Any]) -> None:
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
