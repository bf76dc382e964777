"""A cluster is an Airflow connection (type ``raylift_cluster``), as an AWS account is an ``aws_conn_id``.

Why: a Ray token is code execution on its cluster (the Jobs API). It must go only to the hosts of the cluster it
belongs to, which a Params-supplied URL cannot promise: anyone allowed to trigger a run could point it at their
own server. So the connection holds, together, how to reach the cluster and its credential:

* ``extra.kind``: ``local``, ``ray``, ``ecs`` or ``eks`` (which raylift target drives it);
* the target's own options as ``extra`` keys: ``dashboard_url`` and ``serve_url`` (``ray``), ``cluster_name``,
  ``cloud_map_namespace``, ``region_name``, ``bucket``... (``ecs``/``eks``), ``model_store`` (its state store);
* ``extra.redeploy``: whether scheduled and asset-triggered redeploys run for this cluster (default false);
* the **password**: the cluster's Ray token (``RAY_AUTH_TOKEN`` on the cluster's side).

The connection's form fields are declared in ``raylift.provider`` (Airflow's ``conn-fields``); the Airflow UI's
connection form stores them as extras under their own names, which this module reads (Airflow's older
``extra__raylift_cluster__<name>`` spelling too).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk.bases.hook import BaseHook

from raylift.errors import RayliftValueError

CONN_TYPE = "raylift_cluster"
KINDS = ("local", "ray", "ecs", "eks")
# extras that are the connection's own, not target options
CONTROL_KEYS = ("kind", "redeploy")
# target options that say where the cluster is (and so where its token goes): a run's Params never set these
# when a connection names the cluster
REACH_KEYS = frozenset({
    "dashboard_url", "serve_url",  # ray
    "cluster", "head_address", "cloud_map_namespace", "cloud_map_service", "dashboard_port", "serve_port",
    "endpoint",  # ecs
    "cluster_name", "namespace", "rayservice_name", "kubernetes_conn_id", "worker_nodegroup", "head_nodegroup",  # eks
    "head_service", "worker_service",  # ecs services
    "aws_conn_id", "region_name", "bucket", "state_prefix", "model_prefix", "model_store",  # where state lives
})


class ClusterConnectionError(RayliftValueError):
    """A ``raylift_cluster`` connection is missing, of another type, or holds a value raylift cannot use."""


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port made explicit), for comparing where a request goes."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"


@dataclass(frozen=True)
class ClusterConnection:
    """What a ``raylift_cluster`` connection says. The token is kept out of ``repr`` (logs, tracebacks)."""

    conn_id: str
    kind: str
    options: dict[str, Any]
    redeploy: bool = False
    token: str | None = field(default=None, repr=False)

    @property
    def identity(self) -> str:
        """The cluster's identity for release state and the writer lease: the connection id plus a digest of
        where the connection points (kind and reach options). A connection re-pointed at another cluster gets
        another identity, so it does not inherit that cluster's history; a restart of the same cluster keeps it."""
        reach = {k: v for k, v in sorted(self.options.items()) if k in REACH_KEYS}
        digest = hashlib.sha256(json.dumps([self.kind, reach], sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.conn_id}@{digest}"

    def token_origins(self) -> frozenset[str]:
        """Where this connection's token may be sent: the origins of its own URLs."""
        urls = [self.options[k] for k in ("dashboard_url", "head_address") if isinstance(self.options.get(k), str)]
        return frozenset(origin(u) for u in urls if "://" in u)


def _extras(conn: Any) -> dict[str, Any]:
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else json.loads(conn.extra or "{}")
    prefix = f"extra__{CONN_TYPE}__"
    out: dict[str, Any] = {}
    for key, value in dict(extra).items():
        name = key[len(prefix):] if key.startswith(prefix) else key
        if value in (None, ""):  # a form field left empty
            continue
        out[name] = value
    return out


def parse_connection(conn_id: str, conn: Any) -> ClusterConnection:
    """A ``ClusterConnection`` from an Airflow connection object, or ClusterConnectionError naming the field."""
    if conn.conn_type != CONN_TYPE:
        raise ClusterConnectionError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}, not {CONN_TYPE!r}: a cluster Param names "
            f"a raylift cluster connection (airflow connections add {conn_id} --conn-type {CONN_TYPE} ...)."
        )
    extras = _extras(conn)
    kind = extras.pop("kind", None)
    if kind not in KINDS:
        raise ClusterConnectionError(
            f"Airflow connection {conn_id!r} has kind {kind!r}: set its extra 'kind' to one of {list(KINDS)}."
        )
    redeploy = extras.pop("redeploy", False)
    if isinstance(redeploy, str):
        redeploy = redeploy.strip().lower() in ("1", "true", "yes", "on")
    if not isinstance(redeploy, bool):
        raise ClusterConnectionError(f"Airflow connection {conn_id!r}: extra 'redeploy' must be true or false.")
    return ClusterConnection(
        conn_id=conn_id, kind=str(kind), options=extras, redeploy=redeploy, token=conn.password or None,
    )


class RayliftClusterHook(BaseHook):
    """Reads a ``raylift_cluster`` connection. Its form fields are declared in the provider info."""

    conn_name_attr = "cluster_conn_id"
    default_conn_name = "raylift_cluster_default"
    conn_type = CONN_TYPE
    hook_name = "raylift cluster (Ray Serve + vLLM)"

    def __init__(self, cluster_conn_id: str) -> None:
        super().__init__()
        self.cluster_conn_id = cluster_conn_id

    def cluster(self) -> ClusterConnection:
        try:
            conn = self.get_connection(self.cluster_conn_id)
        except Exception as exc:  # Airflow raises its own "not defined" error type, which differs by version
            if "isn't defined" not in str(exc) and "not defined" not in str(exc) and "not found" not in str(exc):
                raise
            raise ClusterConnectionError(
                f"No Airflow connection {self.cluster_conn_id!r}: add it (airflow connections add "
                f"{self.cluster_conn_id} --conn-type {CONN_TYPE} --conn-extra '{{\"kind\": \"ray\", ...}}'), "
                "or leave the cluster_conn_id Param empty to deploy on the local target."
            ) from None
        return parse_connection(self.cluster_conn_id, conn)
