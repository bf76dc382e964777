"""Deploy one Serve application through the target's Serve API, deferring until it is RUNNING.

Order matters for "nothing already serving is lost": validate first (the config's schema and its fit
on the cluster, then vLLM's engine args), snapshot the config that is serving, then apply. A changed app
(a code update: new weights, args or package) is released as a canary by default (``raylift.release.canary``): the
candidate starts as its own app beside the serving one, which stays untouched until the gate promotes it.
A first deploy, a change that restarts nothing, and ``release: direct`` apply to the app itself. If Serve
reports DEPLOY_FAILED the task fails with Serve's own message; the DAG's rollback step undoes what the run
wrote (``raylift.release.rollback.undo_release``).

The app is any of serve_apps/ (vLLM LLM, llama.cpp, translator): the base config's ``import_path``
gives its kind (``raylift.serve.config.APP_KINDS``), which says whether ``engine_args`` apply and
whether they are vLLM's. The result tells the smoke test which checks to run and where the app answers.
"""

from __future__ import annotations

import time
from typing import Any

from raylift.config import (
    DEFAULT_APP_NAME,
    DEPLOY_TIMEOUT_S,
    ROLLOUT_SURGE_REPLICAS,
)
from raylift.errors import DeployError, RayliftValueError
from raylift.operators.base import Stopwatch, TargetOperator
from raylift.operators.baseline import FreshBaselineMixin
from raylift.records import Artifact, StagedModel


class DeploySteps:
    """The deploy step's own phases before Serve has the config, in seconds: the read and fit check, the app runtime
    check, vLLM's engine-args check (a cached verdict is ~0 s, a new one a vLLM import) and the config write. Kept in
    an XCom at the write, so the phases survive the deferral to the wait."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._t = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.steps[name] = round(now - self._t, 3)
        self._t = now

    def submitted(self, context: Any, name: str) -> None:
        self.lap(name)
        context["ti"].xcom_push(key="deploy_steps", value={**self.steps, "submitted_at": time.time()})


class ServeDeployOperator(FreshBaselineMixin, TargetOperator):
    """Apply one Serve application's config through the target's Serve API and defer until it is RUNNING;
    on DEPLOY_FAILED restore the app's last good config (see the module docstring for the order).

    :param artifact: the build step's ``Artifact`` (its XCom): the ``working_dir`` the app runs from.
    :param model: the stage step's ``StagedModel`` (its XCom): the model URI the app loads.
    :param served_name: the ``model`` name clients send.
    :param app_name: the Serve application's name (apps sharing a cluster need their own).
    :param serve_config: the base config under ``serve_apps/configs/``; its ``import_path`` gives the app's kind.
        ``auto`` (the default): the profile follows the cluster's instances (``raylift.serve.hardware``: GPU,
        Neuron, Graviton, else CPU); a named one is checked against them, and refused before anything is applied
        when no instance can run a replica of it.
    :param replicas: Serve replicas (an integer >= 0; a string from a template is converted).
    :param engine_args: extra vLLM engine args, checked by vLLM before anything is applied.
    :param app_args: extra args for the app.
    :param autoscaling: Serve autoscaling (``min_replicas``, ``max_replicas``...); empty: fixed ``replicas``.
    :param route_prefix: where the app answers; None: the config's.
    :param surge_replicas: extra replicas a code update starts before the old ones stop (start-before-stop);
        0 is stop-before-start, which leaves the app without a serving replica while new ones load.
    :param timeout_s: how long to wait for RUNNING before rolling back.
    :param release: ``canary`` (a changed app starts beside the serving one and is promoted only after its
        gate; ``raylift.release.canary``) or ``direct`` (applied to the app itself, judged while it serves).
    :param deferrable: free the worker slot while Serve deploys (the triggerer waits); False waits in the
        worker on the same condition (the trigger's ``wait()``). None takes Airflow's
        ``[operators] default_deferrable``, as the providers' operators do (raylift's own runs set it True).
    """

    template_fields = (
        *TargetOperator.template_fields,
        "artifact",
        "model",
        "app_name",
        "serve_config",
        "served_name",
        "replicas",
        "engine_args",
        "app_args",
        "autoscaling",
        "route_prefix",
        "surge_replicas",
        "release",
    )

    def __init__(
        self,
        *,
        artifact: Any,
        model: Any,
        served_name: str,
        app_name: str = DEFAULT_APP_NAME,
        serve_config: str = "auto",
        replicas: int | str = 1,
        engine_args: dict[str, Any] | None = None,
        app_args: dict[str, Any] | None = None,
        autoscaling: dict[str, Any] | None = None,
        route_prefix: str | None = None,
        surge_replicas: int | str = ROLLOUT_SURGE_REPLICAS,
        timeout_s: float = DEPLOY_TIMEOUT_S,
        deferrable: bool | None = None,
        release: str = "canary",
        **kwargs: Any,
    ) -> None:
        from raylift.config import default_deferrable

        super().__init__(**kwargs)
        self.release = release
        self.surge_replicas = surge_replicas
        self.artifact, self.model = artifact, model
        self.app_name, self.serve_config, self.served_name = app_name, serve_config, served_name
        self.replicas, self.engine_args, self.app_args = replicas, engine_args or {}, app_args or {}
        self.autoscaling, self.route_prefix = autoscaling or {}, route_prefix
        self.timeout_s = timeout_s
        self.deferrable = default_deferrable(deferrable)

    def render(self) -> dict[str, Any]:
        """This app's Serve config entry, from serve_apps/configs/<serve_config> and the Params."""
        from raylift.serve.config import app_kind, apply_autoscaling, render_app

        try:
            replicas = int(self.replicas)
        except (TypeError, ValueError):
            raise RayliftValueError(f"'replicas' must be an integer >= 0, got {self.replicas!r}.") from None
        if replicas < 0:
            raise RayliftValueError(f"'replicas' must be >= 0, got {replicas}.")
        for field in ("engine_args", "app_args", "autoscaling"):
            if not isinstance(getattr(self, field), dict):
                raise RayliftValueError(f"'{field}' must be a JSON object, got {type(getattr(self, field)).__name__}.")
        name, base = self.hardware_profile()
        kind = app_kind(base["applications"][0])
        if self.engine_args and not kind.engine:
            raise RayliftValueError(
                f"'engine_args' do not apply to the {kind.name} app ({name}); pass its settings in 'app_args'."
            )
        artifact = Artifact.from_xcom(self.artifact)
        model = StagedModel.from_xcom(self.model)
        base_args = base["applications"][0].get("args", {})
        args = {**self.app_args, "model": model.uri, "served_model_name": str(self.served_name)}
        if kind.engine:
            args["engine_args"] = {**base_args.get("engine_args", {}), **self.engine_args}
        self._base = base
        app = render_app(
            base, app_name=str(self.app_name), working_dir=artifact.working_dir, args=args, replicas=replicas,
            route_prefix=str(self.route_prefix) if self.route_prefix else None,
        )
        return apply_autoscaling(app, self.autoscaling)

    def hardware_profile(self) -> tuple[str, dict[str, Any]]:
        """The Serve config file this run deploys, and its contents: ``auto`` follows the cluster's instances, a
        named one is checked against them (``HardwareProfileError`` naming the instance, what it has, what the
        profile needs and what to set). Before anything is applied: ``render`` is the deploy's first step (the run's
        ``check_hardware_profile`` step asked the same before the build and the scale)."""
        from raylift.operators.profile import choose_profile

        name, base, _ = choose_profile(self.target_impl, str(self.serve_config or ""), self.log)
        return name, base

    def check_fit(self, app: dict[str, Any], current: dict[str, Any]) -> None:
        """Refuse, before anything is applied, an app whose config is invalid or cannot fit the cluster."""
        from raylift.serve.config import app_kind
        from raylift.serve.validation import Cluster, check_fit

        state = self.target_impl.cluster_state()
        cluster = Cluster(totals=dict(state.resources), nodes=tuple(state.node_resources))
        report = check_fit(app, cluster, others=current.get("applications", []), vllm=app_kind(app).vllm)
        for line in report.lines:
            self.log.info("fits: %s", line)
        for warning in report.warnings:
            self.log.warning("%s", warning)

    @property
    def surge(self) -> int:
        try:
            surge = int(self.surge_replicas)
        except (TypeError, ValueError):
            raise RayliftValueError(f"'surge_replicas' must be an integer >= 0, got {self.surge_replicas!r}.") from None
        if surge < 0:
            raise RayliftValueError(f"'surge_replicas' must be >= 0 (0: stop-before-start), got {surge}.")
        return surge

    def check_fit_with_surge(self, app: dict[str, Any], current: dict[str, Any]) -> bool:
        """The fit check, counting the surge replica a start-before-stop code update needs at its peak
        (the old replicas run until the new ones do): refused before anything is applied when it does not fit.
        Returns whether this is a stop-before-start code update (surge 0), which leaves the app dark."""
        from raylift.errors import ServeFitError
        from raylift.release.rollout import replica_floor, restarts_replicas, with_surge
        from raylift.serve.config import app_by_name

        old = app_by_name(current, str(self.app_name))
        surge = self.surge
        if not restarts_replicas(old, app):
            self.check_fit(app, current)
            return False
        if surge == 0:
            self.check_fit(app, current)
            running = replica_floor(((old or {}).get("deployments") or [{}])[0])
            self.log.warning(
                "surge_replicas is 0: stop-before-start. Serve stops the old replicas of %r in waves of "
                "max(20 %%, 1) before their replacements load the model, so with %s replica(s) the app has %s "
                "while each new replica starts (the time it takes is logged when the app is RUNNING).",
                self.app_name, running, "no serving replica" if running <= 1 else "fewer replicas",
            )
            return True
        try:
            self.check_fit(with_surge(app, surge), current)
        except ServeFitError as exc:
            raise ServeFitError(
                f"{exc} (This is a code update of a running app, so it rolls out start-before-stop with "
                f"{surge} surge replica(s) running beside the old ones; that peak is what does "
                "not fit. Add a worker, lower replicas, or set the surge_replicas Param to 0 for stop-before-start, "
                "which leaves the app without a serving replica while each new one loads its model.)"
            ) from None
        return False

    def _release_kind(self, app: dict[str, Any], current: dict[str, Any]) -> str:
        """The release :func:`raylift.release.plan.plan_release` chooses for ``app``, logged with its reason."""
        from raylift.release.plan import plan_release
        from raylift.serve.config import app_by_name

        plan = plan_release(self.release, str(self.app_name), app_by_name(current, str(self.app_name)), app)
        self.log.info("release: %s (%s)", plan.kind, plan.why)
        return plan.kind

    def _fits(self, app: dict[str, Any], others: list[dict[str, Any]]) -> None:
        """The fit check of ``app`` beside ``others`` (ServeFitError naming the numbers when it does not fit)."""
        self.check_fit(app, {"applications": others})

    def _deploy_canary(self, context: Any, app: dict[str, Any], current: dict[str, Any],
                       defaults: dict[str, Any], steps: DeploySteps) -> Any:
        """Start the candidate as ``<app>-canary`` beside the serving app (on a lent replica if it must), under
        the cluster's lease, and wait for it (and a lent-from app) to be RUNNING."""
        from raylift.release.canary import CanaryPlan, plan_canary, with_canary
        from raylift.release.rollout import restarts_replicas
        from raylift.release.writer import write_serve_config
        from raylift.serve.config import app_by_name

        name = str(self.app_name)
        run_id = context["run_id"]
        state = self.state_for(name)
        saved = state.canary(run_id)
        earlier = CanaryPlan.from_dict(saved) if saved is not None else None
        serving = app_by_name(current, name)
        if (earlier is not None and earlier.candidate == app and serving is not None
                and not restarts_replicas(earlier.serving, serving)):
            # a retry whose earlier try applied the canary and died: its plan stands (what the serving app lent
            # is known only to it; planned again, the lent-from app would look like a 1-replica app of its own)
            plan = earlier
            self.log.warning("an earlier try of run %s started this canary and did not finish: finishing it", run_id)
        else:
            # the baseline arm runs the anchor's own config when the anchor recorded it (the change measured is
            # then the change since the anchor), else the serving config (raylift.release.canary.with_fresh_baseline)
            anchor_app = (state.anchor() or {}).get("app")
            plan = plan_canary(app, current, name, self._fits,
                               anchor_app=anchor_app if isinstance(anchor_app, dict) else None)
        config = with_canary(current, plan, defaults)
        state.save_canary(run_id, plan.as_dict())
        state.begin_apply(run_id, current, config, surge=self.surge)  # what rollback undoes if this run dies
        write_serve_config(self.target_impl, config, read=current)
        steps.submitted(context, "serve_write_s")
        waiting = [plan.canary["name"], *([name] if plan.lent else [])]
        self.log.info(
            "canary release: candidate started as app %r at %s beside the serving app %r%s; the serving app takes "
            "all user traffic and is not changed until the gate promotes the candidate. Waiting for %s.",
            plan.canary["name"], plan.canary["route_prefix"], name,
            f" (which lends it one of its {plan.baseline_scale + plan.lent} replicas: no room beside it)"
            if plan.lent else "", waiting)
        if plan.baseline is None:
            self.log.warning("baseline arm: the serving app, under its live traffic (%s)", plan.baseline_note)
        context["ti"].xcom_push(key="serve_config", value=config)
        context["ti"].xcom_push(key="release", value="canary")
        trigger = self.target_impl.deploy_trigger(app_names=waiting, timeout_s=self.timeout_s)
        if self.deferrable:
            from datetime import timedelta

            self.defer(trigger=trigger, method_name="execute_complete",
                       timeout=timedelta(seconds=self.timeout_s + 60))
        return self.execute_complete(context, trigger.wait())

    def cluster_defaults(self) -> dict[str, Any]:
        """Cluster-wide Serve options for a first config: the profile's, then where the target's Serve listens."""
        return {**self._base, **self.target_impl.serve_cluster_options()}

    def direct_config(self, app: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
        """The whole Serve config a direct release writes: ``current`` with ``app`` merged in (after ``render``), with
        Serve's own start-before-stop (raylift.release.rollout: a lightweight option, harmless on a new app)."""
        from raylift.release.rollout import with_native_surge
        from raylift.serve.config import merge_app

        return merge_app(current, with_native_surge(app, self.surge), defaults=self.cluster_defaults())

    def execute(self, context: Any) -> Any:
        from raylift.serve.config import app_kind, config_hash

        watch = Stopwatch()
        steps = DeploySteps()
        app = self.render()
        target = self.target_impl
        current = target.current_serve_config()
        release = self._release_kind(app, current)
        if release == "canary":
            from raylift.release.canary import canary_name

            # the candidate's own shape fits the cluster (its room beside the serving app: plan_canary); a canary
            # an earlier try of this run started is not another app's room
            self.check_fit(app, {**current, "applications": [a for a in current.get("applications", [])
                                                              if a.get("name") != canary_name(str(self.app_name))]})
            dark = False
        else:
            dark = self.check_fit_with_surge(app, current)
        steps.lap("read_and_fit_check_s")
        kind = app_kind(app)
        if kind.runtime_module:
            target.ensure_app_runtime(kind.runtime_module, kind.name)
            steps.lap("app_runtime_check_s")
        if kind.vllm:
            target.validate_engine_args(app["args"]["model"], app["args"]["engine_args"],
                                        working_dir=(app.get("runtime_env") or {}).get("working_dir"))
            steps.lap("engine_args_check_s")
        if release == "canary":
            return self._deploy_canary(context, app, current, self.cluster_defaults(), steps)
        config = self.direct_config(app, current)
        run_id = context["run_id"]
        # Before the PUT: what serves now and what this run applies ("applied, not yet proven"). A retry
        # whose earlier try applied and then died (worker lost after the PUT) gets that try's snapshot
        # back: the rollback target stays what served before the run, and the rollout is finished from it.
        earlier = self.state_for(str(self.app_name)).begin_apply(run_id, current, config, surge=self.surge)
        if earlier is not None:
            self.log.warning(
                "an earlier try of run %s applied a config for app %r and did not finish (its worker stopped "
                "after the PUT?): finishing the rollout from the config that served before that try", run_id,
                self.app_name,
            )
        from raylift.release.writer import write_serve_config

        # under the cluster's lock, and only if nobody changed the cluster's config since it was read
        write_serve_config(target, config, read=current)
        steps.submitted(context, "serve_write_s")
        self.log.info(
            "submitted Serve config %s (app %r, %s app(s) in total%s) in %s; waiting for RUNNING",
            config_hash(config)[:12], self.app_name, len(config["applications"]),
            f", start-before-stop with {self.surge} surge replica(s)" if self.surge and not dark else "", watch,
        )
        context["ti"].xcom_push(key="serve_config", value=config)
        context["ti"].xcom_push(key="release", value="direct")
        if dark:
            context["ti"].xcom_push(key="dark_since", value=time.time())
        trigger = target.deploy_trigger(app_names=[str(self.app_name)], timeout_s=self.timeout_s)
        if self.deferrable:
            from datetime import timedelta

            self.defer(
                trigger=trigger,
                method_name="execute_complete",
                timeout=timedelta(seconds=self.timeout_s + 60),
            )
        return self.execute_complete(context, trigger.wait())  # same condition and retry rule, in this worker

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from datetime import UTC, datetime

        from raylift.serve.config import app_by_name, app_kind, app_url, config_hash

        config = context["ti"].xcom_pull(task_ids=self.task_id, key="serve_config")
        release = context["ti"].xcom_pull(task_ids=self.task_id, key="release") or "direct"
        name = str(self.app_name)
        if event.get("status") != "success":
            reason = event.get("message", "unknown")
            raise DeployError(
                f"Serve app {event.get('app') or name!r} did not deploy "
                f"({event.get('app_status') or event.get('status')}): {reason}\n"
                + ("The canary never took user traffic; the rollback step removes it. " if release == "canary"
                   else "The rollback step restores what served before this run. ")
                + "Fix the app/config and redeploy."
            )
        self.log.info("Serve apps RUNNING: %s", event.get("apps"))
        seen = event.get("seen_at")  # when the wait saw RUNNING; resuming the task takes a while after it
        running_at = datetime.fromtimestamp(seen, UTC) if seen else datetime.now(UTC)
        endpoint = self.target_impl.endpoint_url()
        app = app_by_name(config, name) or {}
        out: dict[str, Any] = {
            "running_at": running_at.isoformat(),
            "app_name": self.app_name,
            "release": release,
            "kind": app_kind(app).name,
            "route_prefix": app.get("route_prefix") or "/",
            "config_hash": config_hash(config),
            "endpoint": app_url(endpoint, app),
            "served_name": self.served_name,
        }
        if release == "canary":
            from raylift.release.canary import CanaryPlan

            plan = CanaryPlan.from_dict(self.state_for(name).canary(context["run_id"]) or {})
            # the candidate answers at the canary's route; the baseline arm (a fresh replica started once the
            # canary runs, else the serving app) is measured beside it (operators.baseline)
            out.update({
                "endpoint": app_url(endpoint, plan.canary),
                "canary_app": plan.canary["name"],
                "route_prefix": plan.canary["route_prefix"],
            })
            out["cold_start"] = self.collect_cold_start(str(plan.canary["name"]), running_at.timestamp(),
                                                       context["run_id"], self._deploy_steps(context, running_at))
            return self.start_baseline_arm(context, plan, out)
        dark_since = context["ti"].xcom_pull(task_ids=self.task_id, key="dark_since")
        if dark_since:
            self.log.warning(
                "stop-before-start: app %r was dark (or short of replicas) for up to %.0f s, from the config "
                "change to RUNNING", self.app_name, running_at.timestamp() - float(dark_since),
            )
        out["cold_start"] = self.collect_cold_start(name, running_at.timestamp(), context["run_id"],
                                                   self._deploy_steps(context, running_at))
        return out

    def _deploy_steps(self, context: Any, running_at: Any) -> dict[str, float]:
        """This step's own phases before Serve had the config (``DeploySteps``), then Serve's, from the config
        write to RUNNING as the wait saw it; one task-log line."""
        pulled = dict(context["ti"].xcom_pull(task_ids=self.task_id, key="deploy_steps") or {})
        submitted_at = pulled.pop("submitted_at", None)
        if submitted_at is not None:
            pulled["serve_to_running_s"] = round(running_at.timestamp() - float(submitted_at), 3)
        from raylift.serve.cold_start import DEPLOY_STEPS, deploy_steps_line

        steps = {k: pulled[k] for k in DEPLOY_STEPS if k in pulled}
        if steps:
            self.log.info("deploy step: %s", deploy_steps_line(steps))
        return steps

    def collect_cold_start(self, app_name: str, running_at: float, run_id: str,
                           deploy_steps: dict[str, float] | None = None) -> dict[str, Any]:
        """Each replica this deploy started, by phase (``raylift.serve.cold_start``: Ray's placement, Serve's constructor,
        vLLM's own timings), one task-log line each, also kept as the run's ``cold_start.json`` (the benchmark
        report's table), with this step's own phases (``deploy_steps_s``). Only observed: a cluster or log that
        cannot be read leaves a ``note``; the deploy stands."""
        cold = self._read_cold_start(app_name, running_at)
        if deploy_steps:
            cold["deploy_steps_s"] = deploy_steps
        from raylift.release.state import run_file

        try:
            self.state_for(str(self.app_name)).store.write_json(run_file(run_id, "cold_start"), cold)
        except Exception as exc:  # the XCom still has it
            self.log.warning("cold_start.json not written (%s: %s)", type(exc).__name__, exc)
        return cold

    def _read_cold_start(self, app_name: str, running_at: float) -> dict[str, Any]:
        from raylift.hooks.ray_replica_logs import ReplicaLogReader
        from raylift.serve.cold_start import new_replicas, replica_cold_start, summary_line

        try:
            dashboard = self.target_impl.serve_dashboard()  # None: a target that reaches Serve otherwise
        except NotImplementedError:
            dashboard = None
        if dashboard is None:
            return {"app": app_name, "replicas": [], "note": "this target has no Ray dashboard to read replicas from"}
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
        except Exception as exc:  # observation only: the app is RUNNING whatever its logs say
            self.log.warning("cold start of app %r not read (%s: %s); the deploy stands", app_name,
                             type(exc).__name__, exc)
            return {"app": app_name, "replicas": replicas, "note": f"not read: {type(exc).__name__}: {exc}"}
        if not replicas:
            self.log.info("cold start: no replica of app %r was started by this deploy", app_name)
        for replica in replicas:
            self.log.info("cold start of app %r, %s", app_name, summary_line(replica))
        return {"app": app_name, "replicas": replicas}
