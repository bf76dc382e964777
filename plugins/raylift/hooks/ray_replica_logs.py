"""What a replica's cold start is read from, through the Ray dashboard (raylift reaches Ray only there).

Serve's REST API lists the replicas (``start_time_s``: when the controller started each); the dashboard's actor API
(``GET /logical/actors/<id>``) has the GCS's ``startTime`` (when the actor came alive); the log API
(``GET /api/v0/logs/file``) returns the replica worker's stdout and stderr, where vLLM's engine-core and worker
processes print too (they inherit them), and Serve's own replica log by node and file name. Parsing is
``raylift.serve.cold_start``'s.
"""

from __future__ import annotations

from typing import Any

from raylift.errors import ClusterError
from raylift.hooks.ray_dashboard import RayDashboardHook

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
