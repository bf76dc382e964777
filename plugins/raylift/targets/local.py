"""The embedded default target: a real Ray cluster and a directory model store on this machine.

With ``RAYLIFT_FRONT_PORT`` set, raylift's own HAProxy (``raylift.local.front``) is the endpoint, and a change of
the runtime env (the ``runtime_python`` option) is released blue/green: a second cluster from the new runtime beside
the serving one (``raylift.local.blue_green``), judged there, the front switched to it, the old one stopped.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from raylift.artifact import PackageInputs, build_package
from raylift.config import SERVE_APPS_DIR_NAME, LocalSettings, local_settings, repo_root
from raylift.errors import ClusterError, RayliftValueError
from raylift.hooks.ray_dashboard import RayDashboardHook, ray_auth_token
from raylift.local.cluster import LocalRayCluster
from raylift.local.isolated import AdoptedByAncestorError, run_isolated
from raylift.records import Artifact, ClusterExpectation, StagedModel
from raylift.secrets import child_env
from raylift.staging import stage_model
from raylift.store import LocalStore, open_store
from raylift.targets.base import ClusterPair, Target, runs_remote_code
from raylift.targets.options import TargetOptions
from raylift.targets.serve_control import DashboardServeControl


class StoreOptions(TargetOptions):
    """What the ``local`` and ``ray`` targets share: where models and packages are kept, and the hub's token."""

    model_store: str | None = Field(None, min_length=1)  # a folder or s3:// prefix (None: RAYLIFT_MODEL_STORE)
    hf_conn_id: str | None = None  # an Airflow connection whose password is the hub token
    aws_conn_id: str | None = "aws_default"  # for s3:// sources and stores


class LocalOptions(StoreOptions):
    """The ``local`` target's ``target_options``; ports and paths come from RAYLIFT_* environment variables."""

    TARGET: ClassVar[str] = "local"
    HINT: ClassVar[str] = "(ports and paths come from RAYLIFT_* environment variables)"
    # the runtime env's Python the cluster runs (None: the one the serving cluster runs; none running:
    # RAYLIFT_RUNTIME_PYTHON, else raylift's own); another one than the serving cluster runs is a cluster change,
    # released blue/green behind the front (RAYLIFT_FRONT_PORT)
    runtime_python: str | None = Field(None, min_length=1)


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

    def _init_local(self, opts: StoreOptions, settings: LocalSettings | None) -> None:
        from raylift.local.blue_green import LocalColours

        self.options = opts
        self.base_settings = base = settings or local_settings()
        asked = getattr(opts, "runtime_python", None)  # local's option (the ray target runs what its cluster runs)
        if asked and not Path(asked).is_file():
            raise RayliftValueError(
                f"target_options.runtime_python {asked!r} is not a file: give the Python of a runtime "
                "env built from requirements/runtime.lock (with Ray and vLLM), or leave it out to keep the one the "
                "cluster runs.")
        # the runtime asked for; none: the one the serving cluster runs (no change), else RAYLIFT_RUNTIME_PYTHON
        serving = LocalColours(base, base.runtime_python)
        self.runtime_python = Path(asked) if asked else serving.settings(serving.active()).runtime_python
        self._model_store = opts.model_store or str(base.model_store)
        self.hf_conn_id, self.aws_conn_id = opts.hf_conn_id, opts.aws_conn_id
        self.colours = LocalColours(base, self.runtime_python)
        self._direct = False  # True: bound to one colour's own Serve port (on_cluster), not the front
        self._bind(self.colours.active())
        self._submitted_at: float | None = None  # when this task last submitted a Serve config

    def _bind(self, colour: str) -> None:
        """Drive the ``colour`` cluster (its settings, processes and dashboard)."""
        self.colour = colour
        self.settings = self.colours.settings(colour)
        self.cluster = LocalRayCluster(self.settings)
        # the cluster raylift starts here, on 127.0.0.1: its token is where Ray's own CLI reads it
        self.dashboard = RayDashboardHook(self.settings.dashboard_url, auth_token=ray_auth_token())

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
        front = self.front()
        if front is not None:
            front.ensure(self.colour)
        cpus = self.settings.head_num_cpus + workers * self.settings.worker_num_cpus
        return ClusterExpectation(nodes=1 + workers, resources={"CPU": float(cpus)})

    # -- the canary's fresh baseline arm (raylift.release.canary): room on this machine, and how it is measured ---
    #: Every Ray node of this target is a process group on this one machine's cores: two arms never have a host of
    #: their own, so they are measured one at a time (raylift.release.measured.measurement_design: interleaved).
    arms_share_host: ClassVar[bool] = True
    #: The logical CPUs the fresh baseline replica asks Ray for. Why 0: a logical CPU is Ray's bookkeeping for
    #: placing actors, not a share of the cores (VLLM_CPU_OMP_THREADS_BIND nobind: the OS schedules every engine on
    #: both cores). On ``make demo``'s cluster (one node, 2 logical CPUs) the serving app and the canary take both,
    #: so a baseline asking for 1 never fitted and every canary was judged against the app carrying the live
    #: traffic. The baseline carries no user traffic and, measured interleaved, loads the machine only in its own
    #: turns; idle, a vLLM engine here used 2.2 % of one core (issue 56's probe).
    BASELINE_ARM_NUM_CPUS: ClassVar[float] = 0.0

    @classmethod
    def baseline_arm_room(cls, app: dict[str, Any]) -> dict[str, Any]:
        """The fresh baseline app with room on this cluster: each deployment asks for
        :attr:`BASELINE_ARM_NUM_CPUS` logical CPUs, and keeps the OpenMP threads its own ``num_cpus`` would give it
        (Ray sets an actor's ``OMP_NUM_THREADS`` to ``max(floor(num_cpus), 1)`` when unset:
        ``ray/_private/utils.py`` ``set_omp_num_threads_if_unset``, Ray 2.60; with 0 CPUs it would be 1), so the
        baseline's engine computes as the canary's does (a deployment's ``runtime_env`` env_vars are added to the
        app's: ``ray/serve/_private/utils.py`` ``override_runtime_envs_except_env_vars``). A deployment asking for
        accelerators keeps its request."""
        import copy
        import math

        out = copy.deepcopy(app)
        app_env = (out.get("runtime_env") or {}).get("env_vars") or {}
        for dep in out.get("deployments") or []:
            options = dep.setdefault("ray_actor_options", {})
            if options.get("num_gpus") or (options.get("resources") or {}).get("neuron_cores"):
                continue
            asked = options.get("num_cpus", 1)
            threads = max(math.floor(float(asked)), 1) if isinstance(asked, int | float) else 1
            options["num_cpus"] = cls.BASELINE_ARM_NUM_CPUS
            env = (options.get("runtime_env") or {}).get("env_vars") or {}
            if "OMP_NUM_THREADS" not in env and "OMP_NUM_THREADS" not in app_env:
                options.setdefault("runtime_env", {}).setdefault("env_vars", {})["OMP_NUM_THREADS"] = str(threads)
        return out

    def billed_nodes(self) -> dict[str, int]:
        """Every alive Ray node here is this machine ('local' in the price table: 0 unless declared), a blue/green
        release's second cluster's included."""
        from raylift.local.blue_green import other

        second = LocalRayCluster(self.colours.settings(other(self.colour))).nodes()
        return {"local": self.cluster_state().nodes + len(second)}

    # -- blue/green (raylift.release.blue_green): the other colour's cluster, behind the front -------------------
    def front(self) -> Any:
        """raylift's front HAProxy (``raylift.local.front.LocalFront``), None without RAYLIFT_FRONT_PORT."""
        if not self.base_settings.front_port:
            return None
        from raylift.local.front import LocalFront, haproxy_binary

        haproxy = haproxy_binary(self.base_settings.runtime_python, self.runtime_python)
        return LocalFront(self.base_settings, self.colours.ports(), haproxy)

    def cluster_change(self) -> str | None:
        """A runtime env other than the serving cluster's (``runtime_python``): every node runs the Python it was
        started with, so it needs a new cluster."""
        running = self.cluster.running_runtime()
        if running is None or same_runtime(running, self.runtime_python):
            return None
        return f"the runtime env changes ({running} -> {self.runtime_python})"

    @property
    def replaces_cluster_in_place(self) -> bool:
        return False  # nothing here restarts a running cluster on another runtime

    def blue_green_pair(self) -> ClusterPair:
        from raylift.local.blue_green import other

        if self.base_settings.front_port is None:
            raise ClusterError(
                "A runtime change on local is released blue/green: a second cluster beside the serving one, behind "
                "raylift's front HAProxy, whose port clients keep. Set RAYLIFT_FRONT_PORT (and point clients at it), "
                "or stop the cluster (raylift_teardown) and deploy again on the new runtime. Nothing was changed.")
        return ClusterPair(serving=self.colour, candidate=other(self.colour))

    def on_cluster(self, cluster: str) -> LocalTarget:
        import copy

        bound = copy.copy(self)
        bound._bind(cluster)
        bound._direct = True
        return bound

    def start_cluster(self, cluster: str, *, workers: int) -> None:
        from raylift.local.blue_green import colour_settings

        if cluster == self.colour:
            raise ClusterError(f"the {cluster} cluster serves: a release starts the other one")
        settings = colour_settings(self.base_settings, cluster, self.runtime_python)
        candidate = LocalRayCluster(settings)
        running = candidate.running_runtime()
        if running is not None and not same_runtime(running, self.runtime_python):
            raise ClusterError(
                f"The {cluster} cluster already runs beside the serving one, on {running}, not this release's "
                f"{self.runtime_python}: an earlier release left it. Its rollback step removes it (or run "
                "raylift_teardown). Nothing was changed.")
        candidate.scale(workers)
        candidate.wait_dashboard()

    def switch_endpoint(self, to: str, *, timeout_s: float | None = None) -> None:
        """No wait (``timeout_s`` has nothing to bound): the record first (``<home>/blue_green.json`` names ``to``), then the front: a worker lost in between leaves
        a record that names the cluster the front may serve, never one it has left (``remove_cluster``)."""
        front = self.front()
        if front is None:
            raise ClusterError("no front to switch (RAYLIFT_FRONT_PORT is unset)")
        front.ensure(self.colour)
        self.colours.set_active(to)
        front.switch(to)

    def retire_cluster(self, cluster: str) -> str:
        from raylift.config import DRAIN_TIMEOUT_S

        if cluster == self.colours.active():
            raise ClusterError(f"the {cluster} cluster serves: it is not retired")
        front = self.front()
        left = front.wait_drained(cluster, DRAIN_TIMEOUT_S) if front is not None else 0
        if front is not None:
            front.take_out(cluster)
        LocalRayCluster(self.colours.settings(cluster)).stop()
        return (f"the {cluster} cluster stopped after its requests in flight finished"
                + (f" ({left} still open after {DRAIN_TIMEOUT_S:.0f} s)" if left else ""))

    def remove_cluster(self, cluster: str, *, timeout_s: float | None = None) -> str:
        """The rollback of a release whose switch never was recorded done (``raylift.release.blue_green``'s stage
        ``started``). Where the record already names ``cluster`` (a worker lost between the record and the front's
        switch, or after it), the front may serve it: the front is switched back to the other cluster, still
        running (it is retired only after the release records the switch), the record with it, and only then is
        ``cluster`` stopped. Without the other cluster running, nothing is stopped."""
        from raylift.local.blue_green import other

        said = ""
        if cluster == self.colours.active():
            back = other(cluster)
            front = None if "head" not in LocalRayCluster(self.colours.settings(back)).nodes() else self.front()
            if front is None:
                raise ClusterError(
                    f"the {cluster} cluster serves (the record names it) and the {back} cluster is not running or "
                    "there is no front to switch back to (RAYLIFT_FRONT_PORT): it is not removed. Deploy again (a "
                    "release starts a new candidate beside it) or run raylift_teardown.")
            front.ensure(back)  # a front that is not running starts on the cluster kept
            self.colours.set_active(back)
            front.switch(back)
            said = f"the front switched back to the {back} cluster (the switch to {cluster} was never recorded done); "
        LocalRayCluster(self.colours.settings(cluster)).stop()
        return f"{said}the candidate's {cluster} cluster stopped"

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
        """The front's URL where one is configured (it outlives a cluster), else the cluster's Serve port."""
        if self._direct:
            return self.settings.serve_url
        return self.base_settings.front_url or self.settings.serve_url

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

    def check_serve_schema(self, config: dict[str, Any], app_name: str) -> list[str]:
        """Ray's models in the runtime env judge ``config`` (``raylift/serve/ray_schema_check.py`` run by
        ``runtime_python``: the Ray this release's cluster runs, a blue/green candidate's included). The environment
        is scrubbed as for the engine-args check: it is the cluster's Python, and needs no credential of the worker's.

        A fresh Python importing Serve's models is about a second and a half of CPU, so an accepted verdict is kept,
        as the engine-args check keeps its own, per hash of what decides it (the config, the app, the installed Ray
        and the script) under ``<RAYLIFT_CHECK_CACHE>/serve-schema``; refusals are not kept."""
        import hashlib

        from raylift.serve.validation import SCHEMA_SCRIPT, run_schema_check

        site = sorted(Path(self.runtime_python).parent.parent.glob("lib/python3*/site-packages"))
        digest = hashlib.sha256(json.dumps([config, app_name], sort_keys=True).encode())
        digest.update(" ".join(sorted(p.name for s in site for p in s.glob("ray-*.dist-info"))).encode())
        digest.update(SCHEMA_SCRIPT.read_bytes())
        cached = self.settings.check_cache / "serve-schema" / f"{digest.hexdigest()}.json"
        if site and cached.is_file():
            return [str(w) for w in json.loads(cached.read_text())["warnings"]]
        warnings = run_schema_check(self.runtime_python, config, app_name, env=child_env(),
                                    judge=f"the runtime env at {self.runtime_python}")
        if site:  # a runtime env whose Ray is known by its dist-info (what the hash names)
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.tmp")  # homes share it: never a half-written verdict
            partial.write_text(json.dumps({"app": app_name, "warnings": warnings}))
            partial.replace(cached)
        return warnings

    def validate_engine_args(self, model_path: str, engine_args: dict[str, Any], *,
                             working_dir: str | None = None) -> None:
        """Ask vLLM (in the runtime env) whether it accepts ``engine_args`` for this model, in seconds.

        A fresh runtime Python importing vLLM is ~20 s of a deploy, so an accepted verdict is kept per
        hash of what decides it (the args, the model's config files, the installed vLLM and the check's
        own code) under ``<RAYLIFT_CHECK_CACHE>/engine-args`` (``~/.cache/raylift/checks``, shared by every
        home on this machine): a deploy of a model and args this machine already checked skips it.
        Refusals are not kept (they come back in seconds and name the field). Args that run a model's own code
        are refused first unless the cluster's connection allows them (``check_remote_code``)."""
        import hashlib

        self.check_remote_code(engine_args)
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
        # it imports the model's (user-supplied) code: a minimal environment, outside the worker's process tree
        # (no ancestor's /proc/<pid>/environ holds a secret) and in a Landlock domain (raylift.local.isolated)
        try:
            proc, _ = run_isolated(
                [str(self.settings.runtime_python), "-m", "llm.check_args", model_path, json.dumps(engine_args)],
                python=self.settings.runtime_python, env=child_env(), cwd=apps, timeout=300,
                strict=bool(runs_remote_code(engine_args)))
        except AdoptedByAncestorError as exc:
            raise ClusterError(
                f"The engine-args check was not run: {exc}. It would run the model's own code (the cluster's "
                "connection allows it) where that code could read the Airflow worker's secrets: there is no init "
                "above the worker (e.g. Airflow as a container's PID 1). Run Airflow under an init (the official "
                "image's dumb-init, Compose's `init: true`), or remove the remote-code engine args. Nothing was "
                "deployed.") from exc
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
        """Both colours' clusters, then the front."""
        from raylift.local.blue_green import COLOURS

        for colour in COLOURS:
            LocalRayCluster(self.colours.settings(colour)).stop()
        front = self.front()
        if front is not None:
            front.stop()
        self.colours.record_file.unlink(missing_ok=True)

    def local_store(self) -> LocalStore:
        return LocalStore(self._model_store)


def same_runtime(a: Path, b: Path) -> bool:
    """Whether two runtime Pythons are one runtime env: by their folder's real path, not the interpreter a venv's
    ``bin/python`` links to (every venv of one interpreter resolves to the same file)."""
    return (a.parent.resolve(), a.name) == (b.parent.resolve(), b.name)
