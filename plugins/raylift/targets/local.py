"""The embedded default target: a real Ray cluster and a directory model store on this machine."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any, ClassVar

from pydantic import Field

from raylift.artifact import PackageInputs, build_package
from raylift.config import SERVE_APPS_DIR_NAME, LocalSettings, local_settings, repo_root
from raylift.errors import ClusterError, RayliftValueError
from raylift.hooks.ray_dashboard import RayDashboardHook, ray_auth_token
from raylift.local.cluster import LocalRayCluster
from raylift.records import Artifact, ClusterExpectation, StagedModel
from raylift.secrets import child_env
from raylift.staging import stage_model
from raylift.store import LocalStore, open_store
from raylift.targets.base import Target
from raylift.targets.options import TargetOptions
from raylift.targets.serve_control import DashboardServeControl


class LocalOptions(TargetOptions):
    """The ``local`` target's ``target_options``; ports and paths come from RAYLIFT_* environment variables."""

    TARGET: ClassVar[str] = "local"
    HINT: ClassVar[str] = "(ports and paths come from RAYLIFT_* environment variables)"

    model_store: str | None = Field(None, min_length=1)  # a folder or s3:// prefix (None: RAYLIFT_MODEL_STORE)
    hf_conn_id: str | None = None  # an Airflow connection whose password is the hub token
    aws_conn_id: str | None = "aws_default"  # for s3:// sources and stores


class LocalTarget(DashboardServeControl, Target):
    """``local``: Ray head + N workers as processes bound to 127.0.0.1; packages and models on disk."""

    name = "local"

    def __init__(self, *, settings: LocalSettings | None = None, **options: Any) -> None:
        """``target_options`` for local: ``model_store`` (a folder or s3:// prefix), ``hf_conn_id`` (an
        Airflow connection whose password is the hub token), ``aws_conn_id`` (for s3:// sources/stores).
        Anything else is refused by name: a typo must not be dropped silently. ``settings`` is not an option
        (tests pass a LocalSettings); any other value of it is refused as one."""
        if settings is not None and not isinstance(settings, LocalSettings):
            options = {**options, "settings": settings}
        self._init_local(LocalOptions.parse(options), settings)

    def _init_local(self, opts: LocalOptions, settings: LocalSettings | None) -> None:
        self.options = opts
        self.settings = settings or local_settings()
        self._model_store = opts.model_store or str(self.settings.model_store)
        self.hf_conn_id, self.aws_conn_id = opts.hf_conn_id, opts.aws_conn_id
        self.cluster = LocalRayCluster(self.settings)
        # the cluster raylift starts here, on 127.0.0.1: its token is where Ray's own CLI reads it
        self.dashboard = RayDashboardHook(self.settings.dashboard_url, auth_token=ray_auth_token())
        self._submitted_at: float | None = None  # when this task last submitted a Serve config

    def model_store_uri(self) -> str:
        return self._model_store

    def build_artifact(self, *, force: bool = False) -> Artifact:
        root = repo_root()
        inputs = PackageInputs(root / SERVE_APPS_DIR_NAME, (root / "requirements" / "runtime.lock",))
        path, digest, reused = build_package(inputs, self.settings.artifacts_dir, force=force)
        return Artifact(digest=digest, working_dir=f"file://{path}", reused=reused)

    def stage_model(self, *, source: str, model_id: str, revision: str | None = None, **kw: Any) -> StagedModel:
        from raylift.staging.sources import hub_token_from_connection

        store = open_store(self._model_store, aws_conn_id=self.aws_conn_id)
        return stage_model(
            source, store, model_id=model_id, revision=revision, cache_dir=self.settings.home / "cache",
            aws_conn_id=self.aws_conn_id, hf_token=hub_token_from_connection(self.hf_conn_id), **kw,
        )

    def scale(self, *, workers: int) -> ClusterExpectation:
        if workers < 0:
            raise RayliftValueError(f"workers must be >= 0 (got {workers}).")
        self.cluster.scale(workers)
        cpus = self.settings.head_num_cpus + workers * self.settings.worker_num_cpus
        return ClusterExpectation(nodes=1 + workers, resources={"CPU": float(cpus)})

    def billed_nodes(self) -> dict[str, int]:
        """Every alive Ray node here is this machine ('local' in the price table: 0 unless declared)."""
        return {"local": self.cluster_state().nodes}

    # -- Serve control (raylift.targets.serve_control): this machine's dashboard, its token where Ray's CLI reads it
    def serve_dashboard(self) -> RayDashboardHook:
        return self.dashboard

    def serve_dashboard_url(self) -> str:
        return self.settings.dashboard_url

    def dashboard_down_hint(self) -> str:
        return ": run the scale step (or `make demo`) first."

    def dashboard_trigger_auth(self) -> dict[str, Any]:
        return {"local_token": True}

    def serve_cluster_options(self) -> dict[str, Any]:
        """The proxy on 127.0.0.1 at the configured port, and only on the head: every node here shares
        127.0.0.1 and the endpoint is the head's port. With EveryNode, Serve drains the proxy of a node
        that loses its last replica, and a replica-count change then reset a streaming client's
        connection (1 of 280 under load)."""
        return {
            "http_options": {"host": self.settings.bind_host, "port": self.settings.serve_port},
            "proxy_location": "HeadOnly",
        }

    def endpoint_url(self) -> str:
        return self.settings.serve_url

    def ensure_app_runtime(self, module: str, app_kind: str) -> None:
        """Install what only one app needs into the runtime env on that app's first deploy
        (``tools/setup.sh <app_kind>``): llama-cpp-python compiles from its sdist for minutes, which
        `make demo`, whose LLM app never imports it, should not pay."""
        import logging
        from pathlib import Path

        from raylift.config import own_runtime_python

        probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
        if subprocess.run([str(self.settings.runtime_python), "-c", probe], timeout=60,
                          env=child_env()).returncode == 0:
            return
        if Path(self.settings.runtime_python) != own_runtime_python():
            raise ClusterError(
                f"The {app_kind} app needs {module!r}, which the runtime at {self.settings.runtime_python} "
                "(RAYLIFT_RUNTIME_PYTHON) cannot import: install it there (the pin is in "
                "requirements/runtime.lock); raylift installs it only into its own runtime env. Nothing was deployed."
            )
        command = ["bash", str(repo_root() / "tools" / "setup.sh"), app_kind]
        logging.getLogger(__name__).info(
            "the %s app needs %r, not yet in the runtime env: running %s (the first time it compiles; minutes)",
            app_kind, module, " ".join(command[1:]),
        )
        proc = subprocess.run(command, cwd=repo_root(), capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise ClusterError(
                f"Could not install {module!r} for the {app_kind} app into the runtime env "
                f"(`bash tools/setup.sh {app_kind}` exited {proc.returncode}): {(proc.stdout + proc.stderr)[-800:]} "
                "Run that command by hand to see the whole output; nothing was deployed."
            )

    def validate_engine_args(self, model_path: str, engine_args: dict[str, Any], *,
                             working_dir: str | None = None) -> None:
        """Ask vLLM (in the runtime env) whether it accepts ``engine_args`` for this model, in seconds.

        A fresh runtime Python importing vLLM is ~20 s of a deploy, so an accepted verdict is kept per
        hash of what decides it (the args, the model's config files, the installed vLLM and the check's
        own code) under ``<RAYLIFT_CHECK_CACHE>/engine-args`` (``~/.cache/raylift/checks``, shared by every
        home on this machine): a deploy of a model and args this machine already checked skips it.
        Refusals are not kept (they come back in seconds and name the field)."""
        import hashlib
        from pathlib import Path

        apps = repo_root() / SERVE_APPS_DIR_NAME
        digest = hashlib.sha256(json.dumps(engine_args, sort_keys=True).encode())
        model = Path(model_path)
        for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
            f = model / name
            digest.update(name.encode() + (f.read_bytes() if f.is_file() else b"-"))
        site = sorted(Path(self.settings.runtime_python).parent.parent.glob("lib/python3*/site-packages"))
        digest.update(" ".join(sorted(p.name for s in site for p in s.glob("vllm*.dist-info"))).encode())
        for code in ("llm/check_args.py", "llm/vllm_options.py"):
            digest.update((apps / code).read_bytes() if (apps / code).is_file() else b"-")
        cached = self.settings.check_cache / "engine-args" / f"{digest.hexdigest()}.json"
        if model.is_dir() and cached.is_file():
            return
        proc = subprocess.run(
            [str(self.settings.runtime_python), "-m", "llm.check_args", model_path, json.dumps(engine_args)],
            cwd=apps,
            capture_output=True,
            text=True,
            timeout=300,
            env=child_env(),  # it imports the model's (user-supplied) code: no credential of the worker's
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RayliftValueError(f"Could not check engine_args in the runtime env: {proc.stderr[-500:]}")
        verdict = json.loads(lines[-1])
        if not verdict["ok"]:
            field = f" (field {verdict['field']!r})" if verdict.get("field") else ""
            raise RayliftValueError(f"vLLM rejects engine_args{field}: {verdict['error'][:500]}")
        if model.is_dir():  # a local folder: its config files are in the hash
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.tmp")  # homes share it: never a half-written verdict
            partial.write_text(json.dumps({"model": model_path, "engine_args": engine_args, **verdict}))
            partial.replace(cached)

    def teardown(self) -> None:
        self.cluster.stop()

    def local_store(self) -> LocalStore:
        return LocalStore(self._model_store)
