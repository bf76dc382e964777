"""What a replica's cold start is read from, through the Ray dashboard (raylift reaches Ray only there).

Serve's REST API lists the replicas (``start_time_s``: when the controller started each); the dashboard's actor API
(``GET /logical/actors/<id>``) has the GCS's ``startTime`` (when the actor came alive); the log API
(``GET /api/v0/logs/file``) returns the replica worker's stdout and stderr, where vLLM's engine-core and worker
processes print too (they inherit them), and Serve's own replica log by node and file name. Parsing is
``raylift.serve.cold_start``'s.
"""

from __future__ import annotations

import logging
from typing import Any

from raylift.errors import ClusterError
from raylift.hooks.ray_dashboard import RayDashboardHook

log = logging.getLogger(__name__)

# a fresh replica's logs are some 10 kB; a replica serving for days could have far more: the newest lines suffice
LOG_LINES = 20000


class ReplicaLogReader:
    """Reads one replica's start-up records through ``dashboard`` (its address and token)."""

    def __init__(self, dashboard: RayDashboardHook) -> None:
        self.dashboard = dashboard

    def _text(self, params: dict[str, str]) -> str:
        resp = self.dashboard._request("GET", "/api/v0/logs/file", params={**params, "lines": str(LOG_LINES)})
        if resp.status_code != 200:
            raise ClusterError(f"Ray's log API answered {resp.status_code} for {params}: {resp.text[:300]}")
        return resp.text

    def worker_log(self, actor_id: str) -> str:
        """The replica worker's stdout then stderr (``GET /api/v0/logs/file?actor_id=...&suffix=out|err``)."""
        return self._text({"actor_id": actor_id, "suffix": "out"}) + "\n" + self._text(
            {"actor_id": actor_id, "suffix": "err"})

    def serve_log(self, node_id: str, log_file_path: str) -> str:
        """Serve's log of the replica (``log_file_path`` as Serve's REST API names it, under the node's log dir)."""
        return self._text({"node_id": node_id, "filename": log_file_path.lstrip("/")})

    def actor(self, actor_id: str) -> dict[str, Any]:
        """The GCS's record of the actor (``startTime``: epoch ms it came alive; 0 before)."""
        resp = self.dashboard._request("GET", f"/logical/actors/{actor_id}")
        if resp.status_code != 200:
            raise ClusterError(f"Ray's actor API answered {resp.status_code} for {actor_id}: {resp.text[:300]}")
        return dict((resp.json().get("data") or {}).get("detail") or {})


def read_cold_start(dashboard: RayDashboardHook, app_name: str, running_at: float, *,
                    log: Any = log) -> dict[str, Any]:
    """Each replica of ``app_name`` its last deploy started, by phase (``raylift.serve.cold_start``), one log line each.
    Only observed: a cluster or log that cannot be read leaves a ``note`` (the app is RUNNING whatever its logs say)."""
    from raylift.serve.cold_start import new_replicas, replica_cold_start, summary_line

    replicas: list[dict[str, Any]] = []
    try:
        app = (dashboard.serve_applications().get("applications") or {}).get(app_name) or {}
        reader = ReplicaLogReader(dashboard)
        for replica in new_replicas(app, float(app.get("last_deployed_time_s") or 0)):
            actor_id, node_id = str(replica.get("actor_id") or ""), str(replica.get("node_id") or "")
            log_file = str(replica.get("log_file_path") or "")
            replicas.append(replica_cold_start(
                replica, actor=reader.actor(actor_id) if actor_id else None,
                worker_log=reader.worker_log(actor_id) if actor_id else "",
                serve_log=reader.serve_log(node_id, log_file) if node_id and log_file else "",
                running_at=running_at))
    except Exception as exc:  # observation only
        log.warning("cold start of app %r not read (%s: %s); the deploy stands", app_name, type(exc).__name__, exc)
        return {"app": app_name, "replicas": replicas, "note": f"not read: {type(exc).__name__}: {exc}"}
    if not replicas:
        log.info("cold start: no replica of app %r was started by this deploy", app_name)
    for replica in replicas:
        log.info("cold start of app %r, %s", app_name, summary_line(replica))
    return {"app": app_name, "replicas": replicas}
