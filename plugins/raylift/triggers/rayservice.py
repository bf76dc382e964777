"""Deferrable wait for a RayService: fires once when its apps are RUNNING, fail or time out.

The trigger polls ``GET rayservices/{name}`` with the provider's ``AsyncKubernetesHook``
(kubernetes_asyncio), so nothing in ``run()`` blocks the triggerer's loop. Credentials are built
inside ``run()`` because the triggerer is another host: from the Kubernetes connection, or for EKS
from ``cluster_context`` (cluster name, region, AWS connection id) with a token minted in a worker
thread and re-minted before it expires.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from raylift.kuberay.status import RayServiceStatus, rayservice_status
from raylift.kuberay.manifest import GROUP, PLURAL, VERSION

_AUTH_FAILURES = (401, 403)


class RayServiceReadyTrigger(BaseTrigger):
    """Wait until RayService ``namespace/name`` is Ready with every app in ``app_names`` RUNNING.

    Emits exactly one event: ``{"status": "success", "apps": {...}}``; ``{"status": "failed",
    "message": <Serve's / KubeRay's message>}`` when an app is DEPLOY_FAILED or UNHEALTHY (or the API
    refuses our credentials); ``{"status": "timeout", "message": ...}`` after ``timeout_s``.

    :param cluster_context: ``None`` to use ``kubernetes_conn_id`` as is, or for EKS
        ``{"eks_cluster_name", "region", "aws_conn_id"}`` (see ``raylift.kuberay.eks_auth``).
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        kubernetes_conn_id: str | None = "kubernetes_default",
        app_names: list[str] | None = None,
        timeout_s: float = 600.0,
        poll_interval_s: float = 5.0,
        cluster_context: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.app_names = list(app_names or [])
        self.timeout_s = float(timeout_s)
        self.poll_interval_s = float(poll_interval_s)
        self.cluster_context = dict(cluster_context) if cluster_context else None
        self._hook: Any = None
        self._hook_built_at = 0.0

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "name": self.name,
                "namespace": self.namespace,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "app_names": self.app_names,
                "timeout_s": self.timeout_s,
                "poll_interval_s": self.poll_interval_s,
                "cluster_context": self.cluster_context,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        event = await self._wait()
        yield TriggerEvent({**event, "seen_at": time.time()})  # the run record's trigger→RUNNING

    async def _wait(self) -> dict[str, Any]:
        from kubernetes_asyncio.client.exceptions import ApiException

        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        where = f"RayService {self.namespace}/{self.name}"
        status = RayServiceStatus(ready=False, message="not polled yet")
        last_error = ""
        while True:
            try:
                status = rayservice_status(await self._get())
                last_error = ""
            except ApiException as err:
                if err.status in _AUTH_FAILURES:
                    return {
                        "status": "failed",
                        "message": f"Kubernetes refused to read {where}: HTTP {err.status} {err.reason}",
                    }
                last_error = f"HTTP {err.status} {err.reason}"
            except (OSError, asyncio.TimeoutError) as err:  # API unreachable for a moment: keep polling
                last_error = f"{type(err).__name__}: {err}"
            if last_error:
                self.log.warning("Polling %s failed (%s); retrying", where, last_error)

            apps = {app: status.app_statuses.get(app, "") for app in self.app_names}
            failed = status.failed_apps(self.app_names) if status.observed else {}
            if failed:
                message = (
                    next(iter(failed.values()))
                    if len(failed) == 1
                    else "; ".join(f"{app}: {msg}" for app, msg in failed.items())
                )
                return {"status": "failed", "message": message, "apps": apps, "failed_apps": failed}
            if status.ready and status.all_running(self.app_names):
                return {"status": "success", "apps": apps, "name": self.name, "namespace": self.namespace}
            remaining = deadline - loop.time()
            if remaining <= 0:
                detail = last_error or status.message or "no status message"
                return {
                    "status": "timeout",
                    "message": f"{where} not ready after {self.timeout_s:g}s "
                    f"(ready={status.ready}, upgrading={status.upgrading}, apps={apps}): {detail}",
                    "apps": apps,
                }
            self.log.info("%s not ready yet (apps=%s); next poll in %ss", where, apps, self.poll_interval_s)
            await asyncio.sleep(min(self.poll_interval_s, remaining))

    # -- Kubernetes access ---------------------------------------------------------------------
    async def _get(self) -> dict[str, Any] | None:
        from kubernetes_asyncio.client import CustomObjectsApi
        from kubernetes_asyncio.client.exceptions import ApiException

        hook = await self._async_hook()
        async with hook.get_conn() as api_client:
            try:
                return await CustomObjectsApi(api_client).get_namespaced_custom_object(
                    group=GROUP, version=VERSION, namespace=self.namespace, plural=PLURAL, name=self.name
                )
            except ApiException as err:
                if err.status == 404:
                    return None
                raise

    async def _async_hook(self) -> Any:
        """The provider's async hook; for EKS, rebuilt with a fresh token before the old one expires."""
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook

        if self.cluster_context is None:
            if self._hook is None:
                self._hook = AsyncKubernetesHook(kubernetes_conn_id=self.kubernetes_conn_id)
            return self._hook

        from raylift.kuberay.eks_auth import TOKEN_TTL_S, eks_kubeconfig

        if self._hook is None or time.monotonic() - self._hook_built_at > TOKEN_TTL_S:
            ctx = self.cluster_context
            kubeconfig = await asyncio.to_thread(
                eks_kubeconfig,
                eks_cluster_name=ctx["eks_cluster_name"],
                region=ctx["region"],
                aws_conn_id=ctx.get("aws_conn_id", "aws_default"),
                namespace=self.namespace,
            )
            self._hook = AsyncKubernetesHook(kubernetes_conn_id=None, config_dict=kubeconfig)
            self._hook_built_at = time.monotonic()
        return self._hook
