"""Deploy one Serve application through the target's Serve API, deferring until it is RUNNING.

A shell over ``raylift.release``: render the app (``raylift.serve.render``), let ``plan_release`` choose canary or
direct, check the fit and vLLM's engine args before anything is applied, start the release (``raylift.release.start``:
the snapshot rollback restores, then the write), defer. If Serve reports DEPLOY_FAILED the task fails with Serve's own
message, and the DAG's rollback step undoes what the run wrote (``raylift.release.rollback.undo_release``).
"""

from __future__ import annotations

import time
from typing import Any, cast

from raylift.config import DEFAULT_APP_NAME, DEPLOY_TIMEOUT_S, ROLLOUT_SURGE_REPLICAS
from raylift.operators.base import TargetOperator
from raylift.operators.baseline import FreshBaselineMixin
from raylift.operators.cold_start import ColdStartMixin
from raylift.records import Artifact, StagedModel
from raylift.serve.cold_start import DeploySteps


class ServeDeployOperator(ColdStartMixin, FreshBaselineMixin, TargetOperator):
    """Start one Serve application's release through the target's Serve API and defer until it is RUNNING.

    :param artifact: the build step's ``Artifact`` (its XCom): the ``working_dir`` the app runs from.
    :param model: the stage step's ``StagedModel`` (its XCom): the model URI the app loads.
    :param served_name: the ``model`` name clients send; empty: the staged model's name (``model_id``), as vLLM serves
        a model by its name unless told otherwise.
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
    :param timeout_s: how long to wait for RUNNING before rolling back (the ``deploy_timeout_s`` Param: seconds,
        checked by ``raylift.config.deploy_timeout_s`` before anything is applied).
    :param release: ``canary`` (a changed app starts beside the serving one and is promoted only after its
        gate; ``raylift.release.canary``) or ``direct`` (applied to the app itself, judged while it serves).
    :param deferrable: free the worker slot while Serve deploys (the triggerer waits); False waits in the
        worker on the same condition (the trigger's ``wait()``). None takes Airflow's
        ``[operators] default_deferrable``, as the providers' operators do (raylift's own runs set it True).
    """

    template_fields = (
        *TargetOperator.template_fields, "artifact", "model", "app_name", "serve_config", "served_name", "replicas",
        "engine_args", "app_args", "autoscaling", "route_prefix", "surge_replicas", "release", "timeout_s",
    )

    def __init__(
        self,
        *,
        artifact: Any,
        model: Any,
        served_name: str | None = None,
        app_name: str = DEFAULT_APP_NAME,
        serve_config: str = "auto",
        replicas: int | str = 1,
        engine_args: dict[str, Any] | None = None,
        app_args: dict[str, Any] | None = None,
        autoscaling: dict[str, Any] | None = None,
        route_prefix: str | None = None,
        surge_replicas: int | str = ROLLOUT_SURGE_REPLICAS,
        timeout_s: float | str = DEPLOY_TIMEOUT_S,
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
        # a template ("{{ params.deploy_timeout_s }}") until rendered: execute converts it (config.deploy_timeout_s)
        self.timeout_s = cast(float, timeout_s)
        self.deferrable = default_deferrable(deferrable)

    def render(self) -> dict[str, Any]:
        """This app's Serve config entry, from serve_apps/configs/<serve_config> and the Params."""
        from raylift.serve.render import deploy_app

        name, base = self.hardware_profile()
        self._base = base
        return deploy_app(
            base, name, app_name=str(self.app_name), working_dir=Artifact.from_xcom(self.artifact).working_dir,
            model_uri=StagedModel.from_xcom(self.model).uri, served_name=self.served,
            replicas=self.replicas, engine_args=self.engine_args, app_args=self.app_args,
            autoscaling=self.autoscaling, route_prefix=str(self.route_prefix) if self.route_prefix else None,
        )

    @property
    def served(self) -> str:
        """The name clients send: the ``served_name`` Param, or the staged model's (a template renders null as None)."""
        if self.served_name in (None, "", "None"):
            return str(StagedModel.from_xcom(self.model).model_id)
        return str(self.served_name)

    def hardware_profile(self) -> tuple[str, dict[str, Any]]:
        """The Serve config file this run deploys, and its contents (``raylift.operators.profile.choose_profile``:
        refused before anything is applied when the cluster's instances cannot run it)."""
        from raylift.operators.profile import choose_profile

        name, base, _ = choose_profile(self.target_impl, str(self.serve_config or ""), self.log)
        return name, base

    def check_fit(self, app: dict[str, Any], current: dict[str, Any]) -> None:
        """Refuse, before anything is applied, an app whose config is invalid or cannot fit the cluster."""
        from raylift.release.start import fit_check

        fit_check(self.target_impl, app, current, log=self.log)

    @property
    def surge(self) -> int:
        from raylift.serve.render import non_negative_int

        return non_negative_int(self.surge_replicas, "surge_replicas", " (0: stop-before-start)")

    def check_fit_with_surge(self, app: dict[str, Any], current: dict[str, Any]) -> bool:
        """A direct release's fit check at its rollout's peak; whether it is stop-before-start (the app goes dark)."""
        from raylift.release.start import check_release_fits

        return check_release_fits("direct", app, current, str(self.app_name), self.surge, self.check_fit, log=self.log)

    def cluster_defaults(self) -> dict[str, Any]:
        """Cluster-wide Serve options for a first config: the profile's, then where the target's Serve listens."""
        return {**self._base, **self.target_impl.serve_cluster_options()}

    def direct_config(self, app: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
        """The whole Serve config a direct release of ``app`` (after ``render``) writes."""
        from raylift.release.start import direct_config

        return direct_config(current, app, defaults=self.cluster_defaults(), surge=self.surge)

    def cluster_of(self, kind: str, change: str | None) -> Any:
        """The target the candidate runs on: the serving cluster's, or in a blue/green release the new cluster's
        (not started yet: its pair refused here, before anything, when the target cannot run two). A direct
        release of a cluster change is refused where the target cannot replace the cluster in place."""
        from raylift.errors import RayliftValueError

        target = self.target_impl
        if kind == "blue_green":
            return target.on_cluster(target.blue_green_pair().candidate)
        if change and not target.replaces_cluster_in_place:
            raise RayliftValueError(
                f"release: direct cannot carry out this change on the {target.name} target ({change}): nothing "
                "here restarts the running cluster on it. Use the default release (canary), which releases it "
                "blue/green, or stop the cluster (raylift_teardown) and deploy again. Nothing was changed.")
        return target

    def execute(self, context: Any) -> Any:
        from datetime import timedelta

        from raylift.config import deploy_timeout_s
        from raylift.release.plan import plan_release
        from raylift.release.start import check_release_fits, start_canary, start_direct
        from raylift.serve.config import app_by_name, app_kind

        self.timeout_s = deploy_timeout_s(self.timeout_s)  # refused before anything is applied
        steps = DeploySteps()
        app = self.render()
        target, name, run_id = self.target_impl, str(self.app_name), context["run_id"]
        current = target.current_serve_config()
        change = target.cluster_change()
        plan = plan_release(self.release, name, app_by_name(current, name), app, cluster_change=change)
        self.log.info("release: %s (%s)", plan.kind, plan.why)
        runs_on = self.cluster_of(plan.kind, change)  # where the candidate runs: the serving cluster, or the new one
        dark = check_release_fits(plan.kind, app, current, name, self.surge, self.check_fit, log=self.log)
        steps.lap("read_and_fit_check_s")
        kind = app_kind(app)
        if kind.runtime_module:
            runs_on.ensure_app_runtime(kind.runtime_module, kind.name)
            steps.lap("app_runtime_check_s")
        if kind.vllm:  # by the vLLM of the cluster the candidate runs on
            # a model's own code only where the connection allows it, whichever of the app's args asks for it
            runs_on.check_remote_code({**(app["args"].get("frontend_args") or {}), **app["args"]["engine_args"]})
            runs_on.validate_engine_args(app["args"]["model"], app["args"]["engine_args"],
                                         working_dir=(app.get("runtime_env") or {}).get("working_dir"))
            steps.lap("engine_args_check_s")
        state, defaults = self.state_for(name), self.cluster_defaults()
        if plan.kind == "canary":
            started = start_canary(target, state, run_id, app, current, name, defaults=defaults, surge=self.surge,
                                   fits=self.check_fit, timeout_s=self.timeout_s, log=self.log)
        elif plan.kind == "blue_green":
            from raylift.release.blue_green import start_blue_green
            from raylift.release.start import Started

            config, runs_on = start_blue_green(target, state, run_id, app, current, name, defaults=defaults,
                                               change=str(change), timeout_s=self.timeout_s, log=self.log)
            started = Started("blue_green", config, [name])
        else:
            started = start_direct(target, state, run_id, app, current, name, defaults=defaults, surge=self.surge,
                                   dark=dark, timeout_s=self.timeout_s, log=self.log)
        ti = context["ti"]
        ti.xcom_push(key="cluster_change", value=change)  # a direct cluster change is judged (release.evidence)
        ti.xcom_push(key="deploy_steps", value=steps.submitted("serve_write_s"))
        ti.xcom_push(key="serve_config", value=started.config)
        ti.xcom_push(key="release", value=started.kind)
        if started.dark:
            ti.xcom_push(key="dark_since", value=time.time())
        trigger = runs_on.deploy_trigger(app_names=started.waiting, timeout_s=self.timeout_s)
        if self.deferrable:
            self.keep_lease_while_deferred(self.timeout_s)
            self.defer(trigger=trigger, method_name="execute_complete", timeout=timedelta(seconds=self.timeout_s + 60))
        return self.execute_complete(context, trigger.wait())  # same condition and retry rule, in this worker

    def execute_complete(self, context: Any, event: dict[str, Any]) -> dict[str, Any]:
        from datetime import UTC, datetime

        from raylift.config import deploy_timeout_s
        from raylift.release.canary import CanaryPlan
        from raylift.release.start import deploy_failed, running_result
        from raylift.serve.cold_start import deploy_steps_line, deploy_steps_until

        ti, name = context["ti"], str(self.app_name)
        self.timeout_s = deploy_timeout_s(self.timeout_s)  # rendered again on resume; the baseline arm's wait reads it
        config = ti.xcom_pull(task_ids=self.task_id, key="serve_config")
        release = ti.xcom_pull(task_ids=self.task_id, key="release") or "direct"
        if event.get("status") == "timeout":
            raise type(error := deploy_failed(event, name, release))(
                f"{error}\nThe wait was deploy_timeout_s = {self.timeout_s:.0f} s: raise that Param where a replica "
                "takes longer to start (a Neuron compile, a new node pulling a multi-GB image).")
        if event.get("status") != "success":
            raise deploy_failed(event, name, release)
        self.log.info("Serve apps RUNNING: %s", event.get("apps"))
        seen = event.get("seen_at")  # when the wait saw RUNNING; resuming the task takes a while after it
        running_at = datetime.fromtimestamp(seen, UTC) if seen else datetime.now(UTC)
        plan = CanaryPlan.from_dict(self.state_for(name).canary(context["run_id"]) or {}) if release == "canary" else None
        out = running_result(config, name, self.target_impl.endpoint_url(), plan)
        out.update(running_at=running_at.isoformat(), served_name=self.served, serve_config=config,
                   cluster_change=ti.xcom_pull(task_ids=self.task_id, key="cluster_change"))
        steps = deploy_steps_until(ti.xcom_pull(task_ids=self.task_id, key="deploy_steps"), running_at.timestamp())
        if steps:
            self.log.info("deploy step: %s", deploy_steps_line(steps))
        if release == "blue_green":  # the candidate on its own cluster, the serving app on the serving one
            from raylift.release.blue_green import arms

            out.update(arms(self.target_impl, self.state_for(name), context["run_id"], config, name))
            out["cold_start"] = self.collect_cold_start(
                name, running_at.timestamp(), context["run_id"], steps,
                note=f"blue/green: the candidate's replicas run on the {out['candidate_cluster']} cluster (its own Ray "
                     "dashboard)")
            return out
        if plan is not None:  # the baseline arm is measured beside the candidate (operators.baseline)
            out["cold_start"] = self.collect_cold_start(str(plan.canary["name"]), running_at.timestamp(),
                                                       context["run_id"], steps)
            return self.start_baseline_arm(context, plan, out)
        dark_since = ti.xcom_pull(task_ids=self.task_id, key="dark_since")
        if dark_since:
            self.log.warning(
                "stop-before-start: app %r was dark (or short of replicas) for up to %.0f s, from the config "
                "change to RUNNING", name, running_at.timestamp() - float(dark_since),
            )
        out["cold_start"] = self.collect_cold_start(name, running_at.timestamp(), context["run_id"], steps)
        return out
