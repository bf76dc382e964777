"""Deferrable wait for a RayService: fires once when its apps are RUNNING, fail or time out.

The trigger polls ``GET rayservices/{name}`` with the provider's ``AsyncKubernetesHook``
(kubernetes_asyncio), so nothing in ``run()`` blocks the triggerer's loop. Credentials are built
inside ``run()`` because the triggerer is another host: from the Kubernetes connection, or for EKS
from ``cluster_context`` (cluster name, region, AWS connection id) with a token minted in a worker
thread and re-minted before it expires. ``wait()`` (an operator that does not defer) reads the same object
with the sync ``KubeRayHook`` through the same loop (``raylift.triggers.polling``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from raylift.kuberay.manifest import GROUP, PLURAL, VERSION
from raylift.kuberay.status import RayServiceStatus, UpgradeView, rayservice_status, upgrade_view
from raylift.serve.status import FAILED_APP_STATES, ApplicationStatus
from raylift.triggers.polling import PollingTrigger


class RayServiceReadyTrigger(PollingTrigger):
    """Wait until RayService ``namespace/name`` is Ready with every app in ``app_names`` RUNNING.

    Emits exactly one event: ``{"status": "success", "apps": {...}}``; ``{"status": "failed",
    "message": <Serve's / KubeRay's message>}`` when an app is DEPLOY_FAILED or UNHEALTHY (or the API
    refuses our credentials); ``{"status": "timeout", "message": ...}`` after ``timeout_s``. The loop and its
    retry rule are ``raylift.triggers.polling.PollingTrigger``'s.

    :param name: the RayService's name.
    :param namespace: its namespace.
    :param kubernetes_conn_id: the Kubernetes connection (ignored with ``cluster_context``).
    :param app_names: the Serve applications that must all be RUNNING.
    :param timeout_s: seconds until the ``timeout`` event.
    :param poll_interval_s: seconds between polls.
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
        super().__init__(timeout_s=timeout_s, poll_interval_s=poll_interval_s)
        self.name = name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.app_names = list(app_names or [])
        self.cluster_context = dict(cluster_context) if cluster_context else None
        self._hook: Any = None
        self._hook_built_at = 0.0
        self._sync_hook: Any = None
        self._sync_hook_built_at = 0.0

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

    @property
    def subject(self) -> str:
        return f"RayService {self.namespace}/{self.name}"

    def evaluate(self, status: RayServiceStatus) -> dict[str, Any] | None:
        """The event for one status, or None to keep waiting. Pure, so it is testable."""
        apps = self._apps(status)
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
        return None

    def progress(self, status: RayServiceStatus) -> tuple[str, dict[str, Any]]:
        apps = self._apps(status)
        text = f"ready={status.ready}, upgrading={status.upgrading}, apps={apps}: {status.message or 'no status message'}"
        return text, {"apps": apps}

    def _apps(self, status: RayServiceStatus) -> dict[str, str]:
        return {app: status.app_statuses.get(app, "") for app in self.app_names}

    def poll(self) -> RayServiceStatus:
        return rayservice_status(self._kuberay().get_rayservice(self.name, self.namespace))

    async def apoll(self) -> RayServiceStatus:
        return rayservice_status(await self._get())

    # -- Kubernetes access ---------------------------------------------------------------------
    def _kuberay(self) -> Any:
        """The sync hook for ``wait()``; for EKS, rebuilt with a fresh token before the old one expires."""
        from raylift.hooks.kuberay import KubeRayHook

        if self.cluster_context is None:
            if self._sync_hook is None:
                self._sync_hook = KubeRayHook(self.kubernetes_conn_id)
            return self._sync_hook

        from raylift.kuberay.eks_auth import TOKEN_TTL_S

        if self._sync_hook is None or time.monotonic() - self._sync_hook_built_at > TOKEN_TTL_S:
            self._sync_hook = KubeRayHook(config_dict=self._eks_kubeconfig())
            self._sync_hook_built_at = time.monotonic()
        return self._sync_hook

    def _eks_kubeconfig(self) -> dict[str, Any]:
        from raylift.kuberay.eks_auth import eks_kubeconfig

        ctx = self.cluster_context or {}
        return eks_kubeconfig(
            eks_cluster_name=ctx["eks_cluster_name"],
            region=ctx["region"],
            aws_conn_id=ctx.get("aws_conn_id", "aws_default"),
            namespace=self.namespace,
        )

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

        from raylift.kuberay.eks_auth import TOKEN_TTL_S

        if self._hook is None or time.monotonic() - self._hook_built_at > TOKEN_TTL_S:
            kubeconfig = await asyncio.to_thread(self._eks_kubeconfig)
            self._hook = AsyncKubernetesHook(kubernetes_conn_id=None, config_dict=kubeconfig)
            self._hook_built_at = time.monotonic()
        return self._hook


class RayServiceUpgradeTrigger(RayServiceReadyTrigger):
    """Wait for one step of a held RayService upgrade (``raylift.targets.eks_blue_green``), read off
    ``status.active/pendingServiceStatus`` (``raylift.kuberay.status.upgrade_view``). One condition per instance:

    - ``held``: the pending cluster serves every app in ``app_names`` (RUNNING) at Serve ``targetCapacity`` 100 while
      its ``trafficRoutedPercent`` is still 0: ready to be measured, not switched to. ``failed`` when one of its apps
      is DEPLOY_FAILED / UNHEALTHY, or when traffic reached it (the hold did not hold);
    - ``promoted``: KubeRay made ``candidate`` the active cluster and has no pending one (the switch happened);
      ``failed`` when a rollback started instead;
    - ``removed``: ``candidate`` is neither active nor pending and no rollback runs (KubeRay's rollback finished).

    Events as ``RayServiceReadyTrigger``'s, plus ``view`` (what the status said).

    :param condition: ``held``, ``promoted`` or ``removed``.
    :param candidate: the pending cluster's name (``promoted``, ``removed``; ignored by ``held``).
    """

    CONDITIONS = ("held", "promoted", "removed")

    def __init__(
        self,
        name: str,
        namespace: str,
        condition: str = "held",
        kubernetes_conn_id: str | None = "kubernetes_default",
        app_names: list[str] | None = None,
        candidate: str | None = None,
        timeout_s: float = 600.0,
        poll_interval_s: float = 5.0,
        cluster_context: dict[str, Any] | None = None,
    ) -> None:
        if condition not in self.CONDITIONS:
            raise ValueError(f"condition must be one of {list(self.CONDITIONS)} (got {condition!r}).")
        if condition != "held" and not candidate:
            raise ValueError(f"condition {condition!r} needs the candidate cluster's name.")
        super().__init__(name, namespace, kubernetes_conn_id=kubernetes_conn_id, app_names=app_names,
                         timeout_s=timeout_s, poll_interval_s=poll_interval_s, cluster_context=cluster_context)
        self.condition = condition
        self.candidate = candidate

    def serialize(self) -> tuple[str, dict[str, Any]]:
        path, kwargs = super().serialize()
        return path, {**kwargs, "condition": self.condition, "candidate": self.candidate}

    @property
    def subject(self) -> str:
        what = {"held": "a held pending cluster", "promoted": f"{self.candidate} promoted",
                "removed": f"{self.candidate} removed"}[self.condition]
        return f"RayService {self.namespace}/{self.name} ({what})"

    def evaluate(self, status: Any) -> dict[str, Any] | None:
        view: UpgradeView = status
        out = {"view": view.describe(), "active": view.active, "pending": view.pending}
        if not view.exists:
            return {**out, "status": "failed", "message": f"RayService {self.namespace}/{self.name} not found"}
        if not view.observed:
            return None
        if self.condition == "held":
            if not view.pending:
                return None
            if view.pending_traffic:
                return {**out, "status": "failed", "message": (
                    f"{view.pending_traffic}% of the traffic already goes to pending cluster {view.pending}: the "
                    "upgrade is not held (was the spec re-applied without the hold?)")}
            failed = {app: state for app, state in view.pending_apps.items()
                      if state in FAILED_APP_STATES and (not self.app_names or app in self.app_names)}
            if failed:
                return {**out, "status": "failed", "failed_apps": failed, "message": (
                    f"pending cluster {view.pending}: " + "; ".join(f"{a} {s}" for a, s in failed.items()))}
            running = all(view.pending_apps.get(app) == ApplicationStatus.RUNNING for app in self.app_names)
            if running and view.pending_capacity == 100:
                return {**out, "status": "success", "candidate": view.pending}
            return None
        if self.condition == "promoted":
            if view.rolling_back:
                return {**out, "status": "failed", "message": f"KubeRay is rolling back instead of promoting {self.candidate}"}
            if view.active == self.candidate and not view.pending:
                return {**out, "status": "success", "candidate": self.candidate}
            return None
        if not view.rolling_back and self.candidate not in (view.active, view.pending):
            return {**out, "status": "success", "candidate": self.candidate}
        return None

    def progress(self, status: Any) -> tuple[str, dict[str, Any]]:
        view: UpgradeView = status
        text = view.describe()
        if self.condition == "held" and view.pending and view.pending_capacity != 100:
            # KubeRay v1.7's checkIfNeedTargetCapacityUpdate raises nothing before utils.IsGatewayReady and
            # utils.IsHTTPRouteReady: a Gateway without an address holds the candidate at capacity 0 for good
            text += (f"; KubeRay raises the pending cluster's capacity only once Gateway {self.namespace}/"
                     f"{self.name}-gateway is Accepted and Programmed (an address from its load balancer) and its "
                     f"HTTPRoute accepted: kubectl get gateway,httproute -n {self.namespace}")
        return text, {"view": view.describe()}

    def poll(self) -> Any:
        return upgrade_view(self._kuberay().get_rayservice(self.name, self.namespace))

    async def apoll(self) -> Any:
        return upgrade_view(await self._get())
