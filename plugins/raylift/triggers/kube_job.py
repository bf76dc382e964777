"""Deferrable wait for the Kubernetes staging Job: one event when it is Complete, Failed, or the wait times out.

Polls ``GET jobs/{name}`` (and on failure its pods, for the exit code) with the cncf-kubernetes provider's
``AsyncKubernetesHook`` in the triggerer and its sync ``KubernetesHook`` in ``wait()``; the loop, the retry rule
and the event words are ``PollingTrigger``'s. Credentials are built inside the poll (the triggerer is another host):
the Kubernetes connection, or for EKS ``cluster_context`` with a token minted there and re-minted before it
expires (as ``RayServiceReadyTrigger``). The provider's own ``KubernetesJobTrigger`` takes no such context (it
needs a connection or a config file on the triggerer), hence this one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from raylift.staging.k8s_job import JobOutcome, job_outcome
from raylift.triggers.polling import PollingTrigger


class KubeJobDoneTrigger(PollingTrigger):
    """Wait until Job ``namespace/name`` is Complete or Failed.

    Events: ``success`` (``job``); ``failed`` (``message`` with the Job's reason and the pod's exit code, and
    ``exit_code``/``reason``); ``timeout`` after ``timeout_s`` (the Job is left to its ``activeDeadlineSeconds``).

    :param name: the Job's name.
    :param namespace: its namespace.
    :param kubernetes_conn_id: the Kubernetes connection (ignored with ``cluster_context``).
    :param timeout_s: seconds until the ``timeout`` event.
    :param poll_interval_s: seconds between polls.
    :param cluster_context: ``None`` to use ``kubernetes_conn_id``, or for EKS
        ``{"eks_cluster_name", "region", "aws_conn_id"}`` (see ``raylift.kuberay.eks_auth``).
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str | None = "kubernetes_default",
        timeout_s: float = 7200.0,
        poll_interval_s: float = 15.0,
        cluster_context: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(timeout_s=timeout_s, poll_interval_s=poll_interval_s)
        self.name, self.namespace = name, namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.cluster_context = dict(cluster_context) if cluster_context else None
        self._hooks: dict[str, tuple[Any, float]] = {}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"name": self.name, "namespace": self.namespace, "kubernetes_conn_id": self.kubernetes_conn_id,
             "timeout_s": self.timeout_s, "poll_interval_s": self.poll_interval_s,
             "cluster_context": self.cluster_context},
        )

    @property
    def subject(self) -> str:
        return f"staging Job {self.namespace}/{self.name}"

    def evaluate(self, outcome: JobOutcome) -> dict[str, Any] | None:
        if not outcome.done:
            return None
        if outcome.succeeded:
            return {"status": "success", "job": self.name, "namespace": self.namespace}
        return {"status": "failed", "job": self.name, "namespace": self.namespace, "exit_code": outcome.exit_code,
                "reason": outcome.reason, "message": f"{self.subject} failed: {outcome.describe()}"}

    def progress(self, outcome: JobOutcome) -> tuple[str, dict[str, Any]]:
        return ("running" if not outcome.done else outcome.describe()), {}

    # -- reads: one Job GET per poll; the pods only once it has failed ------------------------------
    def poll(self) -> JobOutcome:
        hook = self._sync_hook()
        job = _not_found_as_none(lambda: hook.batch_v1_client.read_namespaced_job(self.name, self.namespace))
        job_dict = hook.api_client.sanitize_for_serialization(job) if job is not None else None
        outcome = job_outcome(job_dict)
        if outcome.done and not outcome.succeeded and job_dict is not None:
            pods = hook.core_v1_client.list_namespaced_pod(self.namespace, label_selector=f"job-name={self.name}")
            outcome = job_outcome(job_dict, hook.api_client.sanitize_for_serialization(pods).get("items") or [])
        return outcome

    async def apoll(self) -> JobOutcome:
        from kubernetes_asyncio.client import BatchV1Api, CoreV1Api
        from kubernetes_asyncio.client.exceptions import ApiException

        hook = await self._async_hook()
        async with hook.get_conn() as api_client:
            try:
                job = await BatchV1Api(api_client).read_namespaced_job(self.name, self.namespace)
            except ApiException as err:
                if err.status != 404:
                    raise
                return job_outcome(None)
            job_dict = api_client.sanitize_for_serialization(job)
            outcome = job_outcome(job_dict)
            if outcome.done and not outcome.succeeded:
                pods = await CoreV1Api(api_client).list_namespaced_pod(self.namespace,
                                                                       label_selector=f"job-name={self.name}")
                outcome = job_outcome(job_dict, api_client.sanitize_for_serialization(pods).get("items") or [])
            return outcome

    # -- Kubernetes access (a fresh EKS token before the old one expires) ---------------------------
    def _stale(self, kind: str) -> bool:
        from raylift.kuberay.eks_auth import TOKEN_TTL_S

        built = self._hooks.get(kind)
        return built is None or (self.cluster_context is not None and time.monotonic() - built[1] > TOKEN_TTL_S)

    def _kubeconfig(self) -> dict[str, Any]:
        from raylift.kuberay.eks_auth import eks_kubeconfig

        ctx = self.cluster_context or {}
        return eks_kubeconfig(eks_cluster_name=ctx["eks_cluster_name"], region=ctx["region"],
                              aws_conn_id=ctx.get("aws_conn_id", "aws_default"), namespace=self.namespace)

    def _sync_hook(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        if self._stale("sync"):
            hook = (KubernetesHook(kubernetes_conn_id=self.kubernetes_conn_id) if self.cluster_context is None
                    else KubernetesHook(kubernetes_conn_id=None, config_dict=self._kubeconfig()))
            self._hooks["sync"] = (hook, time.monotonic())
        return self._hooks["sync"][0]

    async def _async_hook(self) -> Any:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        if self._stale("async"):
            if self.cluster_context is None:
                hook = AsyncKubernetesHook(kubernetes_conn_id=self.kubernetes_conn_id)
            else:
                hook = AsyncKubernetesHook(kubernetes_conn_id=None, config_dict=await asyncio.to_thread(self._kubeconfig))
            self._hooks["async"] = (hook, time.monotonic())
        return self._hooks["async"][0]


def _not_found_as_none(read: Any) -> Any:
    """``read()``, or None on the API's 404."""
    from kubernetes.client.exceptions import ApiException

    try:
        return read()
    except ApiException as err:
        if err.status == 404:
            return None
        raise
