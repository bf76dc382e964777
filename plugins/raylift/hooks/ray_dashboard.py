"""RayDashboardHook: the Ray dashboard's HTTP API (cluster nodes, Serve REST API), sync and async.

Used by every target: locally the dashboard is on 127.0.0.1; on ECS it is the head task found through
Cloud Map. Only HTTP, so the Airflow worker needs no Ray runtime.

A cluster started with Ray's token auth (``RAY_AUTH_MODE=token``) answers 401 without its token. The hook sends
``Authorization: Bearer <token>`` only with a token it was given for that cluster: the password of the cluster's
``raylift_cluster`` connection (``conn_id``; the address must then be one of that connection's own), or an explicit
``auth_token`` from code that knows whose it is (the ``local`` target passes the token of the cluster it started
itself). A worker's ``RAY_AUTH_TOKEN`` is never sent to an address that came from a run's Params. The token is
never logged nor put in an error message.
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from airflow.sdk.bases.hook import BaseHook

from raylift.errors import ClusterError, CredentialsError, DeployError
from raylift.records import ClusterState
from raylift.secrets import clean_field

# Ray Serve's HTTP_PROXY_TIMEOUT (ray.serve._private.constants; a test reads it there): the first PUT to a cluster
# starts Serve and the dashboard answers only once every proxy is up, or 500 "HTTP proxies not available after
# 60s." when one is not. The PUT's read timeout covers that wait and the controller's start besides.
SERVE_PROXY_START_S = 60
PUT_TIMEOUT_S = 2 * SERVE_PROXY_START_S
# A PUT gets 500 when Serve's proxies were slower than Ray's own bound ("HTTP proxies not available after 60s.");
# Serve's controller keeps starting them, and the config is declarative, so the same PUT is sent again (tenacity), a
# bounded number of times. The same goes for any 500 on the PUT: the dashboard answers 500 only when its handler
# itself raised (its catch-all, init_ray_and_catch_exceptions, with the traceback as the body), never as a verdict on
# the config (that is 400). Seen once in CI on a loaded box: the first PUT to a just-started head got another 500,
# and the deploy failed on it.
ANY_SERVER_ERROR = None
START_ATTEMPTS, START_RETRY_WAIT_S = 3, 5.0
# The 500 a job submission gets while a just-started head has no job agent registered yet (Ray: "please try again
# later"); the same request goes again, as for the proxies above.
JOB_AGENT_NOT_READY = "No available agent to submit job"


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context of every dashboard request in this process (httpx's default verification: its CA bundle).

    Each httpx call or client without one builds its own, parsing the CA bundle again: 48.4 ms of CPU here,
    paid even for a plain-HTTP dashboard, against 0.24 ms with this one; a deploy run makes dozens of dashboard calls
    (bench/README.md, session 26)."""
    return httpx.create_ssl_context()


def ray_error_cause(text: str) -> str:
    """The line that names the cause in a dashboard answer: the last line of a Python traceback (Ray's 500 body is
    ``traceback.format_exc()``, whose first 1000 characters never reach the exception), else the whole answer."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Traceback"):
        return lines[-1][:500]
    return text.strip()[:1000]


class RayAuthError(ClusterError, CredentialsError):
    """The dashboard refused raylift's request: token auth is on and the token is missing or wrong.

    :param status: the dashboard's answer (401, 403), or None when the token could not even be read; a wait
        fails at once on this error rather than retrying it.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[type, tuple[str, int | None]]:
        return (type(self), (self.args[0], self.status))


def ray_auth_token() -> str | None:
    """The token Ray's CLI would send: ``RAY_AUTH_TOKEN``, else the contents of ``RAY_AUTH_TOKEN_PATH``."""
    token = os.environ.get("RAY_AUTH_TOKEN", "").strip()
    if token:
        return token
    path = os.environ.get("RAY_AUTH_TOKEN_PATH", "").strip()
    if path:
        try:
            return Path(path).expanduser().read_text().strip() or None
        except OSError as exc:
            raise RayAuthError(f"RAY_AUTH_TOKEN_PATH names {path!r}, which cannot be read ({type(exc).__name__}).") from None
    return None


class RayDashboardHook(BaseHook):
    """Talk to a Ray dashboard at ``address`` (``http://host:8265``), or the one a ``raylift_cluster`` connection names.

    :param address: the dashboard; with ``conn_id`` it must be one of the connection's own (or found from its
        options, as the ECS head through Cloud Map), since the connection's token goes there.
    :param conn_id: a ``raylift_cluster`` connection: its password is the token.
    :param auth_token: a token the caller knows belongs to ``address`` (the local cluster raylift started).
    """

    conn_name_attr = "cluster_conn_id"
    default_conn_name = "raylift_cluster_default"
    conn_type = "raylift_cluster"
    hook_name = "Ray dashboard"

    def __init__(
        self,
        address: str | None = None,
        *,
        conn_id: str | None = None,
        timeout_s: float = 30.0,
        auth_token: str | None = None,
    ):
        super().__init__()
        if conn_id:
            from raylift.hooks.raylift_cluster import RayliftClusterHook, origin

            cluster = RayliftClusterHook(conn_id).cluster()
            address = address or cluster.options.get("dashboard_url")
            if not address:
                raise RayAuthError(f"Connection {conn_id!r} names no dashboard_url: set it in the connection's extra.")
            allowed = cluster.token_origins()
            if cluster.token and allowed and origin(address) not in allowed:
                raise RayAuthError(
                    f"Refusing to send connection {conn_id!r}'s Ray token to {address}: it is not that connection's "
                    f"dashboard ({', '.join(sorted(allowed))}). Nothing was sent."
                )
            auth_token = cluster.token
        if not address:
            raise ClusterError("RayDashboardHook needs a dashboard address or a raylift_cluster connection id.")
        self.address = address.rstrip("/")
        self.timeout_s = timeout_s
        # a token pasted with its newline would be an illegal header on every poll: trimmed, checked, masked
        self._token = clean_field(auth_token, where=f"the Ray token for {self.address}", field="value", secret=True)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"} if self._token else {}

    def _check_auth(self, resp: httpx.Response) -> httpx.Response:
        if resp.status_code == 401:
            raise RayAuthError(
                f"The Ray dashboard at {self.address} requires a token (the cluster runs with RAY_AUTH_MODE=token) "
                "and raylift sent none: set the cluster's token as the password of its raylift_cluster connection "
                "(the cluster_conn_id Param); for target local, RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH).",
                status=401,
            )
        if resp.status_code == 403:
            raise RayAuthError(
                f"The Ray dashboard at {self.address} rejected raylift's token (403): it is not the cluster's "
                "RAY_AUTH_TOKEN. Check the password of the cluster's raylift_cluster connection.",
                status=403,
            )
        return resp

    # -- plain parsing, shared by the sync and async paths ------------------------------------
    @staticmethod
    def parse_nodes(payload: dict[str, Any]) -> ClusterState:
        nodes = payload["data"]["result"]["result"]
        alive = [n for n in nodes if n.get("state") == "ALIVE"]
        totals: dict[str, float] = {}
        per_node: list[dict[str, float]] = []
        for node in alive:
            resources = {
                name: float(amount)
                for name, amount in node.get("resources_total", {}).items()
                if not name.startswith("node:") and name not in ("memory", "object_store_memory")
            }
            per_node.append(resources)
            for name, amount in resources.items():
                totals[name] = totals.get(name, 0.0) + amount
        return ClusterState(nodes=len(alive), resources=totals, node_resources=per_node)

    @staticmethod
    def app_statuses(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """``{app: {"status": ..., "message": ...}}`` from ``GET /api/serve/applications/``."""
        apps = payload.get("applications") or {}
        return {
            name: {"status": app.get("status"), "message": app.get("message") or ""}
            for name, app in apps.items()
        }

    @staticmethod
    def deployed_config(payload: dict[str, Any]) -> dict[str, Any]:
        """Rebuild the declarative config that is applied now, from ``GET /api/serve/applications/``."""
        apps = [
            app["deployed_app_config"]
            for app in (payload.get("applications") or {}).values()
            if app.get("deployed_app_config")
        ]
        config: dict[str, Any] = {"applications": apps}
        http = payload.get("http_options")
        if http:
            config["http_options"] = {k: http[k] for k in ("host", "port") if k in http}
        if payload.get("proxy_location"):
            config["proxy_location"] = payload["proxy_location"]
        return config

    # -- sync ---------------------------------------------------------------------------------
    def _request_while_starting(self, method: str, path: str, transient: str | None, why: str,
                                **kwargs: Any) -> httpx.Response:
        """``_request``, sent again (tenacity: ``START_ATTEMPTS``, ``START_RETRY_WAIT_S`` apart) while Ray answers 500
        with ``transient`` (any 500 for ``ANY_SERVER_ERROR``): a part of a starting cluster that Ray itself says is
        not up yet. Returns the last answer: the caller names a refusal that outlasts the attempts."""
        from tenacity import RetryCallState, Retrying, retry_if_result, stop_after_attempt, wait_fixed

        def not_up_yet(resp: httpx.Response) -> bool:
            return resp.status_code == 500 and (transient is ANY_SERVER_ERROR or transient in resp.text)

        def last_answer(state: RetryCallState) -> httpx.Response:
            assert state.outcome is not None
            answer: httpx.Response = state.outcome.result()
            return answer

        def say_again(state: RetryCallState) -> None:
            assert state.outcome is not None
            self.log.warning("%s (%s %s, attempt %d of %d: %s): sending it again", why, method, path,
                             state.attempt_number, START_ATTEMPTS, ray_error_cause(state.outcome.result().text))

        retrying = Retrying(retry=retry_if_result(not_up_yet), stop=stop_after_attempt(START_ATTEMPTS),
                            wait=wait_fixed(START_RETRY_WAIT_S), retry_error_callback=last_answer, before_sleep=say_again)
        return retrying(self._request, method, path, **kwargs)

    def _request(self, method: str, path: str, *, timeout_s: float | None = None, **kwargs: Any) -> httpx.Response:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            resp = httpx.request(method, f"{self.address}{path}", timeout=timeout, headers=self.headers,
                                 verify=tls_context(), **kwargs)
        except httpx.ReadTimeout:
            raise ClusterError(
                f"The Ray dashboard at {self.address} took the connection but did not answer {method} {path} within "
                f"{timeout:.0f} s: the head is overloaded or Serve is still starting. Retry the step, or look at the "
                "head's dashboard and Serve controller logs."
            ) from None
        except httpx.TransportError as exc:
            raise ClusterError(
                f"Cannot reach the Ray dashboard at {self.address} ({type(exc).__name__}): "
                "is the cluster up? Run the scale step first, or check the head address."
            ) from None
        return self._check_auth(resp)

    def is_up(self) -> bool:
        try:
            return httpx.get(f"{self.address}/api/version", timeout=2, headers=self.headers,
                             verify=tls_context()).status_code == 200
        except httpx.TransportError:
            return False

    def _nodes_payload(self) -> dict[str, Any]:
        resp = self._request("GET", "/api/v0/nodes", params={"detail": "1", "limit": "1000"})
        if resp.status_code != 200:
            raise ClusterError(f"Ray dashboard {self.address} answered {resp.status_code} for nodes.")
        return dict(resp.json())

    def cluster_state(self) -> ClusterState:
        return self.parse_nodes(self._nodes_payload())

    def alive_nodes(self) -> list[dict[str, Any]]:
        """Ray's records of the alive nodes (``node_id``, ``is_head_node``, ``resources_total``, ...)."""
        return [n for n in self._nodes_payload()["data"]["result"]["result"] if n.get("state") == "ALIVE"]

    @staticmethod
    def serve_replicas(payload: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], float]]:
        """``("app/deployment/replica", replica, CPUs)`` for every replica in ``GET /api/serve/applications/``, any
        state (CPUs from the deployment's ``ray_actor_options``, Serve's default 1)."""
        for app, details in (payload.get("applications") or {}).items():
            for name, deployment in (details.get("deployments") or {}).items():
                options = (deployment.get("deployment_config") or {}).get("ray_actor_options") or {}
                cpus = 1.0 if options.get("num_cpus") is None else float(options["num_cpus"])
                for replica in deployment.get("replicas") or []:
                    yield f"{app}/{name}/{replica.get('replica_id')}", replica, cpus

    @classmethod
    def replica_cpus(cls, payload: dict[str, Any]) -> dict[str, dict[str, float]]:
        """``{node_id: {"app/deployment/replica": CPUs}}`` for every live Serve replica (a STOPPING one's CPUs are as
        good as free)."""
        out: dict[str, dict[str, float]] = {}
        for key, replica, cpus in cls.serve_replicas(payload):
            if replica.get("node_id") and replica.get("state") != "STOPPING":
                out.setdefault(replica["node_id"], {})[key] = cpus
        return out

    @classmethod
    def replicas_on(cls, payload: dict[str, Any], node_id: str) -> list[str]:
        """Every Serve replica (``app/deployment/replica``) still on a node, STOPPING ones included.

        Unlike :meth:`replica_cpus` (capacity), this is what stopping the node would cut: a STOPPING replica still
        drains, and behind HAProxy stays reachable for Ray's draining period while HAProxy drops it. A node stopped
        once only those were left killed one in the middle of a streamed answer (the scale-down test, 1 of 280
        requests)."""
        return sorted(key for key, replica, _ in cls.serve_replicas(payload) if replica.get("node_id") == node_id)

    def serve_applications(self) -> dict[str, Any]:
        resp = self._request("GET", "/api/serve/applications/")
        if resp.status_code != 200:
            raise ClusterError(f"Ray dashboard {self.address} answered {resp.status_code}: {resp.text[:300]}")
        return resp.json()

    def put_serve_config(self, config: dict[str, Any]) -> None:
        """``PUT /api/serve/applications/``: replaces every application not listed in ``config``.

        Waits as long as Ray's dashboard may take to start Serve (``PUT_TIMEOUT_S``), and sends the same PUT again
        when the dashboard fails on it (500: Serve's proxies not up in Ray's own bound, or any other exception in its
        handler: ``ANY_SERVER_ERROR``); a config Serve rejects (400) is not sent again."""
        resp = self._request_while_starting(
            "PUT", "/api/serve/applications/", ANY_SERVER_ERROR,
            f"Ray's dashboard failed on the Serve config (Serve's proxies wait up to {SERVE_PROXY_START_S} s)",
            json=config, timeout_s=max(self.timeout_s, PUT_TIMEOUT_S))
        if resp.status_code != 200:
            cause = ray_error_cause(resp.text)
            detail = f" Ray's answer ends: {resp.text[-1500:]}" if cause != resp.text.strip() else ""
            raise DeployError(f"Ray Serve refused the config ({resp.status_code}): {cause}.{detail}")

    # -- for waits (raylift.triggers): httpx's own errors propagate, sync and async -----------------
    # Unlike serve_applications() / _request(), these keep httpx's TransportError / HTTPStatusError (with the
    # status code), so the wait can retry a passing failure (connection, timeout, 5xx, 429) and fail at once on
    # the rest. One GET in two forms; each wait's reads below name the path.
    def _poll_json(self, path: str) -> dict[str, Any]:
        resp = httpx.get(f"{self.address}{path}", timeout=self.timeout_s, headers=self.headers, verify=tls_context())
        self._check_auth(resp).raise_for_status()
        return dict(resp.json())

    async def _apoll_json(self, path: str) -> dict[str, Any]:
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers, verify=tls_context()) as client:
            resp = await client.get(f"{self.address}{path}")
        self._check_auth(resp).raise_for_status()
        return dict(resp.json())

    def poll_serve_applications(self) -> dict[str, Any]:
        """``GET /api/serve/applications/`` in this process; the async twin is ``aserve_applications``."""
        return self._poll_json("/api/serve/applications/")

    async def aserve_applications(self) -> dict[str, Any]:
        """``GET /api/serve/applications/`` without blocking the triggerer's loop."""
        return await self._apoll_json("/api/serve/applications/")

    def poll_job_status(self, submission_id: str) -> dict[str, Any]:
        """``GET /api/jobs/<id>``: ``{"status": PENDING|RUNNING|SUCCEEDED|FAILED|STOPPED, "message": ...}``
        (ray.job_submission.JobDetails), in this process; the async twin is ``ajob_status``."""
        return self._poll_json(f"/api/jobs/{submission_id}")

    async def ajob_status(self, submission_id: str) -> dict[str, Any]:
        """``GET /api/jobs/<id>`` without blocking the triggerer's loop."""
        return await self._apoll_json(f"/api/jobs/{submission_id}")

    # -- Ray Jobs (REST API: POST /api/jobs/, GET /api/jobs/<id>, GET /api/jobs/<id>/logs) -------
    def submit_job(self, entrypoint: str, runtime_env: dict[str, Any] | None = None) -> str:
        """Run ``entrypoint`` (a shell command) on the cluster's head node; returns the submission id."""
        resp = self._request_while_starting(
            "POST", "/api/jobs/", JOB_AGENT_NOT_READY, "Ray's job agent is not up yet",
            json={"entrypoint": entrypoint, "runtime_env": runtime_env or {}})
        if resp.status_code != 200:
            raise ClusterError(f"Ray dashboard {self.address} refused the job ({resp.status_code}): {resp.text[:500]}")
        return str(resp.json()["submission_id"])

    def job_logs(self, submission_id: str) -> str:
        resp = self._request("GET", f"/api/jobs/{submission_id}/logs")
        return str(resp.json().get("logs", "")) if resp.status_code == 200 else ""
