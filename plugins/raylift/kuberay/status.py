"""Reading a RayService's status (pure: no Kubernetes client, safe for DAG-facing imports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raylift.serve.status import FAILED_APP_STATES, ApplicationStatus

# KubeRay copies Serve's own application states into ``applicationStatuses[*].status``.
AppStatus = ApplicationStatus


@dataclass(frozen=True)
class RayServiceStatus:
    """What a RayService reports, reduced to what a deploy wait needs.

    ``ready``: the Ready condition is True (or, for KubeRay < 1.3, ``serviceStatus == "Running"``),
    the operator has seen the current spec, and no upgrade is pending. ``app_statuses`` and
    ``app_messages`` come from the cluster serving traffic, overlaid by the pending cluster's while a
    new-cluster upgrade is in flight (that is where a new config fails).
    """

    ready: bool
    app_statuses: dict[str, str] = field(default_factory=dict)
    message: str = ""
    app_messages: dict[str, str] = field(default_factory=dict)
    upgrading: bool = False
    observed: bool = True  # status.observedGeneration caught up with metadata.generation

    def failed_apps(self, names: list[str] | None = None) -> dict[str, str]:
        """``{app: message}`` for apps (of ``names``, or all) in DEPLOY_FAILED / UNHEALTHY."""
        return {
            app: self.app_messages.get(app) or state
            for app, state in self.app_statuses.items()
            if state in FAILED_APP_STATES and (names is None or app in names)
        }

    def all_running(self, names: list[str]) -> bool:
        return all(self.app_statuses.get(app) == ApplicationStatus.RUNNING for app in names)


def rayservice_status(obj: dict[str, Any] | None) -> RayServiceStatus:
    """Read ``status.conditions[type=Ready]``, ``active/pendingServiceStatus`` and ``serviceStatus``."""
    if not obj:
        return RayServiceStatus(ready=False, message="RayService not found")
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    observed_generation = status.get("observedGeneration")
    observed = generation is None or observed_generation is None or observed_generation >= generation

    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    upgrading = (conditions.get("UpgradeInProgress") or {}).get("status") == "True"
    pending = status.get("pendingServiceStatus") or {}
    if pending.get("rayClusterName"):
        upgrading = True
    if "Ready" in conditions:
        ready_condition = conditions["Ready"]
        ready = ready_condition.get("status") == "True"
        message = ready_condition.get("message") or ready_condition.get("reason") or ""
    else:  # KubeRay < 1.3 has no conditions, only serviceStatus
        ready = status.get("serviceStatus") == "Running"
        message = status.get("serviceStatus") or ""

    app_statuses: dict[str, str] = {}
    app_messages: dict[str, str] = {}
    for source in (status.get("activeServiceStatus") or {}, pending):
        for app, info in (source.get("applicationStatuses") or {}).items():
            app_statuses[app] = info.get("status", "")
            app_messages[app] = _app_message(info)
    return RayServiceStatus(
        ready=ready and observed and not upgrading,
        app_statuses=app_statuses,
        message=message,
        app_messages=app_messages,
        upgrading=upgrading,
        observed=observed,
    )


def _app_message(info: dict[str, Any]) -> str:
    """The app's own message, else the first failing deployment's (Serve puts the traceback there)."""
    if info.get("message"):
        return str(info["message"])
    for deployment, dep in (info.get("serveDeploymentStatuses") or {}).items():
        if dep.get("message"):
            return f"{deployment}: {dep['message']}"
    return ""


@dataclass(frozen=True)
class UpgradeView:
    """The two clusters of a RayService upgrade as its status shows them (``active``/``pendingServiceStatus``):
    names, Serve ``targetCapacity`` and ``trafficRoutedPercent`` (the incremental upgrade's), the pending cluster's
    app states, and whether a rollback runs (condition ``RollbackInProgress``). ``None`` where KubeRay wrote none."""

    active: str = ""
    pending: str = ""
    active_capacity: int | None = None
    pending_capacity: int | None = None
    active_traffic: int | None = None
    pending_traffic: int | None = None
    pending_apps: dict[str, str] = field(default_factory=dict)
    rolling_back: bool = False
    observed: bool = True
    exists: bool = True

    def describe(self) -> str:
        return (f"active={self.active or '-'} (capacity {self.active_capacity}, traffic {self.active_traffic}), "
                f"pending={self.pending or '-'} (capacity {self.pending_capacity}, traffic {self.pending_traffic}, "
                f"apps {self.pending_apps or {}})" + (", rolling back" if self.rolling_back else ""))


def upgrade_view(obj: dict[str, Any] | None) -> UpgradeView:
    """Read a RayService's upgrade state (pure)."""
    if not obj:
        return UpgradeView(exists=False)
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation")
    observed_generation = status.get("observedGeneration")
    active = status.get("activeServiceStatus") or {}
    pending = status.get("pendingServiceStatus") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    return UpgradeView(
        active=str(active.get("rayClusterName") or ""),
        pending=str(pending.get("rayClusterName") or ""),
        active_capacity=active.get("targetCapacity"),
        pending_capacity=pending.get("targetCapacity"),
        active_traffic=active.get("trafficRoutedPercent"),
        pending_traffic=pending.get("trafficRoutedPercent"),
        pending_apps={app: str(info.get("status", "")) for app, info in (pending.get("applicationStatuses") or {}).items()},
        rolling_back=(conditions.get("RollbackInProgress") or {}).get("status") == "True",
        observed=generation is None or observed_generation is None or observed_generation >= generation,
    )
