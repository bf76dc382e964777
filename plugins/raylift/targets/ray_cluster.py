"""``ray``: deploy onto a Ray cluster raylift did not start (Compose's ``ray-head``, or one a user already runs).

The cluster is reached only through what the user names: its dashboard (Serve REST API, nodes, Ray Jobs) and
its Serve endpoint. raylift never starts, scales or stops it: the scale step checks that it answers and takes
its nodes as they are, and teardown leaves it running (``raylift_undeploy`` removes an app). What must run
where vLLM and Ray run (the engine-args check, an app's extra module, Ray's Serve schema check) runs there, as a
Ray job on the head node (``raylift.targets.ray_jobs``).

Packages and models are handed to the cluster by path (``file://`` working dirs, the model store folder), as
on ``local``: the cluster must see ``RAYLIFT_HOME`` and the model store at the same paths (Compose mounts one
volume on both sides), or use an ``s3://`` model store.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import shlex
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from raylift.config import LocalSettings
from raylift.errors import ClusterError, CredentialsError, RayliftValueError
from raylift.hooks.ray_dashboard import RayDashboardHook, ray_auth_token
from raylift.records import ClusterExpectation
from raylift.targets.base import ClusterPair, Target
from raylift.targets.local import LocalTarget, StoreOptions
from raylift.targets.ray_jobs import RayJobChecks

log = logging.getLogger(__name__)


def _http_url(option: str, value: str, example: str) -> str:
    """``value`` as ``scheme://host[:port]`` (http or https), or a ValueError naming the option. raylift appends
    its API paths to this URL (``<dashboard_url>/api/...``): a ``#`` or ``?`` would turn them into a fragment or a
    query (the request then goes to whatever path the URL names), userinfo would send credentials from Params,
    and a path would aim raylift's requests below it; so none of them is taken."""
    parts = urlsplit(value)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    wrong = ("not http(s) with a host" if parts.scheme not in ("http", "https") or not parts.hostname
             else "a user or password in it" if "@" in parts.netloc
             else "no valid port" if not port_ok
             else "a '?' query" if parts.query or "?" in value
             else "a '#' fragment" if parts.fragment or "#" in value
             else f"a path ({parts.path!r})" if parts.path not in ("", "/")
             else None)
    if wrong:
        raise ValueError(
            f"target 'ray' needs target_options.{option} as scheme://host:port only, http(s) (e.g. {example}); "
            f"got {value!r}, with {wrong}. Give the cluster's address alone; credentials belong in a "
            "raylift_cluster connection."
        )
    return f"{parts.scheme}://{parts.netloc}"


class RayOptions(StoreOptions):
    """The ``ray`` target's ``target_options``: the cluster's two URLs, plus ``model_store``, ``hf_conn_id`` and
    ``aws_conn_id`` as for local."""

    TARGET: ClassVar[str] = "ray"
    HINT: ClassVar[str] = ""

    dashboard_url: str = Field(description="an http(s) URL with a host (e.g. http://ray-head:8265)")
    serve_url: str = Field(description="an http(s) URL with a host (e.g. http://ray-head:8000)")

    @field_validator("dashboard_url")
    @classmethod
    def _dashboard_url(cls, value: str) -> str:
        return _http_url("dashboard_url", value, "http://ray-head:8265")

    @field_validator("serve_url")
    @classmethod
    def _serve_url(cls, value: str) -> str:
        return _http_url("serve_url", value, "http://ray-head:8000")


class RayClusterTarget(RayJobChecks, LocalTarget):
    """``ray``: an existing Ray cluster at ``dashboard_url`` serving on ``serve_url``; models and packages as on local."""

    name = "ray"

    def __init__(self, *, settings: LocalSettings | None = None, **options: Any) -> None:
        """``target_options`` for ray: ``dashboard_url`` (the cluster's Ray dashboard, e.g.
        ``http://ray-head:8265``) and ``serve_url`` (its Serve endpoint, e.g. ``http://ray-head:8000``), both
        required; ``model_store``, ``hf_conn_id`` and ``aws_conn_id`` as for local."""
        if settings is not None and not isinstance(settings, LocalSettings):
            options = {**options, "settings": settings}
        opts = RayOptions.parse(options)
        self._init_local(opts, settings)
        self.options = opts
        self.dashboard_url = opts.dashboard_url
        self.serve_url = opts.serve_url
        self.dashboard = RayDashboardHook(self.dashboard_url)  # no token: these URLs came from Params

    # -- credentials: a token goes only to its own connection's hosts ------------------------------------
    def attach_cluster(self, cluster: Any) -> None:
        """The cluster's connection named these URLs: its token (the password) goes to its dashboard."""
        super().attach_cluster(cluster)
        self.dashboard = RayDashboardHook(self.dashboard_url, conn_id=cluster.conn_id)

    def check_credentials(self) -> None:
        """Refuse a run whose dashboard URL came from its Params while this worker holds a Ray token: that URL
        may be anyone's, and the token is code execution on the cluster it belongs to. Nothing is sent."""
        if self.cluster_conn_id is None and ray_auth_token():
            raise CredentialsError(
                "target 'ray': target_options.dashboard_url came from this run's Params, and this worker holds a "
                "Ray token (RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH). raylift sends a Ray token only to the hosts of "
                "the cluster's own raylift_cluster connection: add one for this cluster (kind 'ray', its "
                "dashboard_url and serve_url, the token as its password) and name it in the cluster_conn_id Param. "
                "Nothing was sent."
            )

    # -- cluster: as it is ---------------------------------------------------------------------
    def cluster_change(self) -> str | None:
        """None: raylift never restarts or replaces a cluster it did not start (nor reads this machine's own)."""
        return None

    @property
    def replaces_cluster_in_place(self) -> bool:
        return True  # nothing to replace: the cluster is as it is

    def blue_green_pair(self) -> ClusterPair:
        return Target.blue_green_pair(self)  # refused: one cluster, as it is

    def scale(self, *, workers: int) -> ClusterExpectation:
        """No scaling (raylift did not start this cluster): the cluster must answer, and is expected as it is."""
        if workers < 0:
            raise RayliftValueError(f"workers must be >= 0 (got {workers}).")
        state = self.cluster_state()
        if workers != state.nodes - 1:
            log.warning(
                "target 'ray' does not scale a cluster it did not start: %s has %d node(s) (head + %d worker(s)); "
                "the workers Param (%d) is not applied. Resize the cluster itself (e.g. `docker compose up "
                "--scale ray-worker=N`).", self.dashboard_url, state.nodes, state.nodes - 1, workers,
            )
        return ClusterExpectation(nodes=state.nodes)

    def teardown(self) -> None:
        """Leave the cluster and its apps running: raylift did not start it (``raylift_undeploy`` removes an app)."""
        log.info(
            "target 'ray': the cluster at %s was not started by raylift, so teardown leaves it (and its Serve "
            "apps) running; remove an app with raylift_undeploy.", self.dashboard_url,
        )

    def billed_nodes(self) -> dict[str, int]:
        """Unknown: raylift cannot tell what a cluster it did not start runs on (the benchmark reports no cost)."""
        return {}

    # -- Serve control (raylift.targets.serve_control): the dashboard the user named, its connection's token
    def serve_dashboard_url(self) -> str:
        return self.dashboard_url

    def dashboard_down_hint(self) -> str:
        return (" (target_options.dashboard_url): start that cluster (raylift does not start clusters for the ray "
                "target) or fix the URL.")

    def dashboard_trigger_auth(self) -> dict[str, Any]:
        return {"cluster_conn_id": self.cluster_conn_id}

    def serve_cluster_options(self) -> dict[str, Any]:
        """Serve listens where ``serve_url`` says, when this config is the cluster's first (a running Serve keeps
        its own HTTP options): on 127.0.0.1 for a loopback URL, else on every interface of the node."""
        parts = urlsplit(self.serve_url)
        try:
            loopback = ipaddress.ip_address(parts.hostname or "").is_loopback
        except ValueError:
            loopback = parts.hostname == "localhost"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return {"http_options": {"host": "127.0.0.1" if loopback else "0.0.0.0", "port": port}}

    def endpoint_url(self) -> str:
        return self.serve_url

    # -- checks where vLLM runs: Ray jobs on the cluster (RayJobChecks.run_job), Ray's Serve schema included -----
    def ensure_app_runtime(self, module: str, app_kind: str) -> None:
        """The cluster's own Python must import ``module``: raylift installs nothing into a cluster it did not start."""
        probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
        status, logs = self.run_job(f"python -c {shlex.quote(probe)}")
        if status != "SUCCEEDED":
            raise ClusterError(
                f"The {app_kind} app needs {module!r}, which the Python of the Ray cluster at {self.dashboard_url} "
                f"cannot import (job {status}): install it in the cluster's image (the pin is in "
                f"requirements/runtime.lock). Nothing was deployed. {logs[-300:]}"
            )

    def validate_engine_args(self, model_path: str, engine_args: dict[str, Any], *,
                             working_dir: str | None = None) -> None:
        """vLLM on the cluster checks ``engine_args`` for the model (``llm.check_args`` as a Ray job, in the app's
        package), so what the cluster's vLLM refuses fails the task in seconds, naming the field. Args that run
        a model's own code are refused first unless the cluster's connection allows them (``check_remote_code``)."""
        self.check_remote_code(engine_args)
        if not working_dir:
            raise RayliftValueError("the engine-args check on a ray cluster needs the app's runtime_env.working_dir.")
        entrypoint = shlex.join(["python", "-m", "llm.check_args", model_path, json.dumps(engine_args)])
        status, logs = self.run_job(entrypoint, {"working_dir": working_dir})
        lines = [ln for ln in logs.splitlines() if ln.startswith("{")]
        if status != "SUCCEEDED" or not lines:
            raise ClusterError(
                f"Could not check engine_args on the Ray cluster at {self.dashboard_url} (job {status}): "
                f"{logs[-500:]}"
            )
        verdict = json.loads(lines[-1])
        if not verdict["ok"]:
            field = f" (field {verdict['field']!r})" if verdict.get("field") else ""
            raise RayliftValueError(f"vLLM on the Ray cluster rejects engine_args{field}: {verdict['error'][:500]}")
