"""The one interface every deployment target implements (``local``, ``ecs``, ``eks``).

The DAG calls these methods through target-agnostic operators and never branches on the cloud.
Each method is one user-visible pipeline step; results are small JSON-able dataclasses so they can
travel through XCom (``to_xcom``/``from_xcom``) without leaking secrets; they live in ``raylift.records``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

from raylift.records import Artifact, ClusterExpectation, ClusterState, StagedModel

if TYPE_CHECKING:
    from airflow.triggers.base import BaseTrigger

    from raylift.hooks.ray_dashboard import RayDashboardHook
    from raylift.hooks.raylift_cluster import ClusterConnection
    from raylift.lease import Lease
    from raylift.serve.hardware import InstanceShape
    from raylift.store import ObjectStore
    from raylift.targets.scale_in import ScaleInPlan
    from raylift.triggers.polling import PollingTrigger

class ClusterUndo(NamedTuple):
    """What ``Target.undo_cluster_change`` did, and the Serve config a head it restarted must be given again (it
    starts with none; the caller writes it through ``raylift.release.writer``), or None."""

    message: str
    reapply: dict[str, Any] | None = None


class ClusterPair(NamedTuple):
    """A blue/green release's two clusters, by the names their target gives them (local: the colours): the one that
    serves users now, and the one the candidate is started and judged on."""

    serving: str
    candidate: str


@runtime_checkable
class ServeSchemaChecker(Protocol):
    """An optional capability: Ray's own models judge a Serve config where the Ray that will run it is (the runtime
    env's Python on ``local``, a Ray job on the cluster's head on ``ray`` and ``ecs``), so its rules are that Ray
    version's, and the Airflow side needs no Ray. A target without it (``eks``: its dashboard is inside the cluster)
    leaves that check to the cluster when the config is applied (KubeRay, then Serve, refuse it there)."""

    def check_serve_schema(self, config: dict[str, Any], app_name: str) -> list[str]:
        """Judge ``config`` (the whole Serve config a release writes: ``app_name`` beside the other apps) with Ray's
        models (``raylift/serve/ray_schema_check.py``). Returns Ray's warnings (fields Serve ignores); raises
        ServeFitError with Ray's refusal (field paths and reasons), ClusterError when no verdict came back."""
        ...


@runtime_checkable
class PodStartReader(Protocol):
    """An optional capability: a target whose Ray nodes are Kubernetes pods (``eks``) reads the cold start of the
    pods a deploy started from the Kubernetes API (``raylift.kuberay.cold_start``), where the replicas' own logs
    are behind a Ray dashboard Airflow does not reach. Targets with a dashboard read their replicas instead."""

    def pod_cold_start(self, since: float) -> list[dict[str, Any]]:
        """Each Ray pod of the target's clusters created at or after ``since`` (epoch seconds), by phase."""
        ...


@runtime_checkable
class BucketWriter(Protocol):
    """An optional capability: a target that writes to S3 prefixes its options name (``ecs``, ``eks``: models,
    release state, artifacts and the image build's context under ``bucket``). A Params-only run's must lie under an
    operator-set root (``raylift.hooks.raylift_cluster.check_bucket_writes``): the trigger does not choose where
    raylift writes, an MWAA environment's DAGs bucket included."""

    def s3_write_locations(self) -> dict[str, str]:
        """Each ``s3://bucket/prefix`` this target writes under, by the options that name it."""
        ...


# Engine args that make vLLM or transformers run code a run chose, each with the values that do not: a model repo's
# own modules (trust_remote_code: its config's auto_map), or classes imported by the path given (the worker class,
# its extension, logits processors). Refused unless the cluster's connection allows remote code.
REMOTE_CODE_ENGINE_ARGS: dict[str, tuple[Any, ...]] = {
    "trust_remote_code": (False, None, 0, "", "false", "False", "0", "no", "off"),
    "worker_cls": (None, "", "auto"),
    "worker_extension_cls": (None, ""),
    "logits_processors": (None, [], ""),
}


def runs_remote_code(engine_args: Mapping[str, Any]) -> list[str]:
    """The engine args in ``engine_args`` that run code the run chose (``REMOTE_CODE_ENGINE_ARGS``), sorted."""
    return sorted(name for name, off in REMOTE_CODE_ENGINE_ARGS.items()
                  if name in engine_args and engine_args[name] not in off)


class Target(ABC):
    """A place raylift deploys to. Subclasses register themselves by ``name``."""

    name: ClassVar[str]

    # -- build / stage -------------------------------------------------------------------------
    @abstractmethod
    def build_artifact(self, *, force: bool = False) -> Artifact:
        """Package serve_apps + runtime requirements; reuse an existing artifact with the same digest."""

    @abstractmethod
    def stage_model(
        self,
        *,
        source: str,
        model_id: str,
        revision: str | None = None,
        allow_patterns: list[str] | None = None,
        ignore_patterns: list[str] | None = None,
    ) -> StagedModel:
        """Copy the model from ``source`` into the model store; skip files whose checksum matches.
        ``allow_patterns``/``ignore_patterns`` filter hub downloads (None: skip duplicate weight formats)."""

    def start_build(self, *, force: bool = False) -> tuple[Artifact, BaseTrigger | None]:
        """Begin the build: the artifact, and a trigger to defer on while it is produced (None: ready now)."""
        return self.build_artifact(force=force), None

    def finish_build(self, artifact: Artifact) -> Artifact:
        """After a deferred build succeeded: what is left to do (e.g. re-point a moving image tag)."""
        return artifact

    # -- cluster -------------------------------------------------------------------------------
    @abstractmethod
    def scale(self, *, workers: int) -> ClusterExpectation:
        """Start or resize the Ray cluster to ``workers`` worker nodes (0 allowed); do not wait."""

    @abstractmethod
    def cluster_state(self) -> ClusterState:
        """Ask the running cluster what it has (raises ClusterError when it cannot be reached)."""

    def undo_cluster_change(self) -> ClusterUndo | None:
        """The rollback step's part for what this release's ``scale`` changed in the cluster itself (ECS: the
        services put on a new image), done before the Serve config is judged. None: nothing to undo."""
        return None

    def cluster_ready_trigger(self, want: ClusterExpectation) -> BaseTrigger | None:
        """A trigger for the slow first part of a scale (e.g. ECS tasks starting), or None to just poll."""
        return None

    def check_ready(self, want: ClusterExpectation) -> ClusterState:
        """What the cluster reports, or ClusterNotReadyError naming what is still missing."""
        from raylift.errors import ClusterNotReadyError

        state = self.cluster_state()
        gaps = state.missing(want)
        if gaps:
            raise ClusterNotReadyError(f"The Ray cluster is missing {', '.join(gaps)}.")
        return state

    def instance_shapes(self) -> tuple[InstanceShape, ...]:
        """The instance types the cluster's Serve replicas run on, as EC2 describes them: what the ``serve_config``
        Param's ``auto`` follows and what a named profile is checked against. Empty: unknown (the local and ``ray``
        targets: ``auto`` keeps the CPU profile and nothing is checked)."""
        return ()

    def describe_cluster(self) -> str:
        """The cluster, for messages."""
        return f"the {self.name} target's cluster"

    def aws_region(self) -> str | None:
        """The AWS region the cluster runs in (a price table's), None off AWS (``local``, ``ray``)."""
        return None

    # -- blue/green: a change the serving cluster cannot run (raylift.release.blue_green) -----------------------
    def cluster_change(self) -> str | None:
        """Why this release needs a new cluster (a new image, runtime, Ray or vLLM version, node shape), said for
        the release plan; None: the serving cluster runs it (the default: a target that cannot tell)."""
        return None

    @property
    def replaces_cluster_in_place(self) -> bool:
        """Whether ``release: direct`` can carry out a :meth:`cluster_change` in place (ECS: the services rolled to
        the new image by the scale step; EKS: KubeRay's own upgrade), an announced outage."""
        return True

    def blue_green_pair(self) -> ClusterPair:
        """The serving cluster and the one a blue/green release starts beside it.

        :raises ClusterError: this target cannot run two clusters side by side (the message says what to do)."""
        from raylift.errors import ClusterError

        raise ClusterError(f"the {self.name} target cannot release a cluster change blue/green: set release to "
                           "'direct' (the cluster is replaced in place, an announced outage)")

    def on_cluster(self, cluster: str) -> Target:
        """This target bound to one of :meth:`blue_green_pair`'s clusters (its Serve API, endpoint and dashboard)."""
        raise NotImplementedError(f"the {self.name} target has no second cluster")

    def start_cluster(self, cluster: str, *, workers: int) -> None:
        """Start ``cluster`` (the candidate) beside the serving one with ``workers`` workers, on what this release
        asks for (its runtime or image), and wait until its Serve API answers. Resumable: a running one is kept."""
        raise NotImplementedError(f"the {self.name} target has no second cluster")

    def switch_endpoint(self, to: str, *, timeout_s: float | None = None) -> None:
        """Send the endpoint's new requests to ``to``; requests in flight finish where they are. ``timeout_s`` (the
        run's ``deploy_timeout_s``) bounds a switch that waits for the candidate to take traffic (EKS: KubeRay's
        switch, which may grow the candidate onto new nodes); a switch that does not wait has nothing to bound."""
        raise NotImplementedError(f"the {self.name} target has no second cluster")

    def retire_cluster(self, cluster: str) -> str:
        """After a switch: let ``cluster``'s requests in flight finish, then stop it; says what was done."""
        raise NotImplementedError(f"the {self.name} target has no second cluster")

    def remove_cluster(self, cluster: str, *, timeout_s: float | None = None) -> str:
        """A rejected candidate's cluster stopped (never the serving one); says what was done. ``timeout_s`` as in
        :meth:`switch_endpoint`, for a removal that waits (EKS)."""
        raise NotImplementedError(f"the {self.name} target has no second cluster")

    # -- what a target can do beyond the steps (the defaults: it cannot) ---------------------------
    @property
    def stages_remotely(self) -> bool:
        """Whether the model copy runs beside the cluster (:meth:`start_staging`) instead of in this worker."""
        return False

    def start_staging(
        self, *, source: str, model_id: str, revision: str | None, request_id: str, **patterns: Any
    ) -> tuple[Any, BaseTrigger]:
        """Launch the remote model copy (only where :attr:`stages_remotely`)."""
        raise NotImplementedError(f"the {self.name} target stages in the worker (stage_model), not remotely")

    def scale_in_plan(self, workers: int) -> ScaleInPlan | None:
        """The members a scale-in to ``workers`` removes after Ray drained them, or None: a plain ``scale`` (a
        scale-out, the same count, or a target that does not drain: ``raylift.targets.scale_in.DrainedScaleIn``
        drains)."""
        return None

    def start_drain(self, plan: ScaleInPlan) -> PollingTrigger | None:
        """Ask Ray to drain ``plan``'s nodes (only where :meth:`scale_in_plan` returns plans)."""
        raise NotImplementedError(f"the {self.name} target does not drain before a scale-in")

    def finish_scale_in(self, plan: ScaleInPlan, event: Mapping[str, Any] | None = None) -> ClusterExpectation:
        """Remove the drained members, then ``scale`` (only where :meth:`scale_in_plan` returns plans)."""
        raise NotImplementedError(f"the {self.name} target does not drain before a scale-in; run the scale "
                                  "step again")

    def serve_dashboard(self) -> RayDashboardHook | None:
        """The Ray dashboard Serve is reached through (replica nodes, logs), or None where there is none to read
        (a RayService reached through Kubernetes)."""
        return None

    def billed_nodes(self) -> dict[str, int]:
        """Instance type -> count of the nodes this target's Ray cluster runs now (what is billed per hour).
        Empty when the target cannot tell; the benchmark then reports no cost rather than a wrong one."""
        return {}

    # -- serve ---------------------------------------------------------------------------------
    @abstractmethod
    def current_serve_config(self) -> dict[str, Any]:
        """The Serve config currently applied (``{"applications": [...], ...}``); empty apps if none."""

    @abstractmethod
    def apply_serve_config(self, config: dict[str, Any]) -> None:
        """Apply a whole Serve config (the caller has merged it with what is running)."""

    @abstractmethod
    def deploy_trigger(self, *, app_names: list[str], timeout_s: float, optional: bool = False) -> PollingTrigger:
        """A trigger that fires when ``app_names`` are RUNNING, or with Serve's error when one fails. A
        ``PollingTrigger``: an operator that does not defer waits on the same condition with its ``wait()``.
        ``optional``: an app the release can do without (the canary's fresh baseline); where Serve reports
        that Ray cannot schedule its replica, the wait ends then (``failed``) rather than at ``timeout_s``."""

    def resume_after_submit(self, submitted_at: float) -> None:
        """An earlier try of this task submitted the Serve config at ``submitted_at`` (epoch seconds) and died
        before its wait: :meth:`deploy_trigger` counts Serve's deploys from then, since nothing is submitted
        again. No-op where the wait does not go by deploy times (a RayService's status)."""

    def undeploy_trigger(self, *, app_name: str, timeout_s: float) -> PollingTrigger | None:
        """The wait until Serve no longer lists a removed app, or None where the config write is the removal
        (a RayService spec: KubeRay reconciles it, and the spec no longer lists the app once written)."""
        return None

    @abstractmethod
    def endpoint_url(self) -> str:
        """Base URL of the OpenAI-compatible endpoint (without ``/v1``)."""

    @abstractmethod
    def teardown(self) -> None:
        """Scale to zero and stop what ``scale`` started. Idempotent."""

    # -- shared, overridable ---------------------------------------------------------------------
    def serve_cluster_options(self) -> dict[str, Any]:
        """Serve's cluster-wide options (``http_options``, ``proxy_location``) this target decides
        for a cluster's first config; what it leaves out comes from the app's config file."""
        return {}

    def publish_benchmark(self, result: dict[str, Any], *, model: str, run_id: str) -> list[str]:
        """Send a benchmark's figures where this target's dashboard reads them; returns the metric names sent.
        Nothing here (local: the run record and report are the dashboard); AWS targets publish to CloudWatch."""
        return []

    def ensure_app_runtime(self, module: str, app_kind: str) -> None:
        """Make sure the cluster's runtime can import ``module``, which only the ``app_kind`` app needs.
        The images built for AWS targets carry every app's packages, so nothing to do here."""

    def check_remote_code(self, engine_args: Mapping[str, Any]) -> None:
        """Refuse, before anything runs or is applied, engine args that make vLLM or transformers run code the run
        chose (a model repo's own ``*.py``, or a class named by import path: ``REMOTE_CODE_ENGINE_ARGS``) unless
        the cluster's connection allows it (its extra ``allow_remote_code``). A Params-only run has no connection,
        so it never may: trigger rights are not code-execution rights."""
        from raylift.errors import RayliftValueError

        asked = runs_remote_code(engine_args)
        if not asked or self.allow_remote_code:
            return
        where = (f"connection {self.cluster_conn_id!r} does not allow it: set its extra allow_remote_code to true "
                 "(whoever may edit connections decides)" if self.cluster_conn_id else
                 "this run names no cluster connection (cluster_conn_id), and only a connection with its extra "
                 "allow_remote_code set to true allows it")
        raise RayliftValueError(
            f"engine_args.{asked[0]} {engine_args[asked[0]]!r}"
            + (f" (and {', '.join(asked[1:])})" if asked[1:] else "")
            + f" would run code this run chose (a model repo's own code, or a class named by import path) on the "
            f"engine-args check and on every replica, and {where}. Remove it, or deploy through a cluster_conn_id "
            "whose connection allows remote code. Nothing was applied."
        )

    def validate_engine_args(self, model_path: str, engine_args: dict[str, Any], *,
                             working_dir: str | None = None) -> None:
        """Refuse engine args vLLM would reject, before deploying (``working_dir``: the app's package, for a
        target that runs the check on the cluster). Targets that cannot run vLLM before the deploy (ecs, eks) say so
        in the task log: the image's vLLM parses them when the replica starts, where a refusal is Serve's
        DEPLOY_FAILED and the deploy rolls back (tests/images/test_image_vllm_options.py checks the profiles')."""
        import logging

        self.check_remote_code(engine_args)
        logging.getLogger(__name__).warning(
            "engine_args %s are not checked before the deploy on target %r: the image's vLLM parses them when the "
            "replica starts, and an option it refuses fails the deploy there (DEPLOY_FAILED, rolled back).",
            sorted(engine_args), getattr(self, "name", type(self).__name__),
        )

    def state_uri(self) -> str:
        """Where run records and the last good Serve config are kept (the model store by default)."""
        return self.model_store_uri()

    def state_store(self) -> ObjectStore:
        """The store that holds this cluster's release state and its writer lease (``state_uri()``)."""
        from raylift.store import open_store

        options = getattr(self, "options", None)
        aws = getattr(self, "aws", None)
        conn_id = getattr(aws, "aws_conn_id", None) or getattr(options, "aws_conn_id", None)
        return open_store(self.state_uri(), aws_conn_id=conn_id)

    #: set from the cluster's ``raylift_cluster`` connection (``attach_cluster``); None: the target kind alone
    #: names the cluster (the zero-configuration ``local``, or options given as Params)
    cluster_identity: str | None = None
    cluster_conn_id: str | None = None
    #: the connection's ``allow_remote_code`` (``check_remote_code``); never true without a connection
    allow_remote_code: bool = False
    #: the writer lease a release holds over several tasks (``raylift.operators.lease``); the Serve-config writes
    #: of this target are fenced by it instead of taking a lease of their own
    held_lease: Lease | None = None
    #: the container image (``images/<name>``) this release runs, as its ``check_hardware_profile`` step chose it
    #: for the profile (``raylift.operators.base``); ``chosen_image``: what ``choose_image`` chose in this step.
    #: None: none chosen (a target that runs no image, or a step outside a release)
    release_image: str | None = None
    chosen_image: str | None = None
    #: whether ``scale`` carries out a change of the cluster itself in place (an ECS image rollout): the scale step
    #: sets it from the release (``raylift.release.plan.replaced_in_place``); False leaves it to the deploy step's
    #: blue/green release
    cluster_change_in_place: bool = True

    def choose_image(self, profile: str, config: dict[str, Any], *, known: bool = True) -> str | None:
        """The image that runs Serve config ``profile`` (contents ``config``) here, checked against the target's
        options and the release's image (``HardwareProfileError`` naming both and what to set); ``known``: False
        for ``auto`` before the cluster's instances are seen. None: this target runs no image of raylift's."""
        return None

    def attach_cluster(self, cluster: ClusterConnection) -> None:
        """This target drives the cluster ``cluster`` names: its identity keys state; its token is its own."""
        self.cluster_identity = cluster.identity
        self.cluster_conn_id = cluster.conn_id
        self.allow_remote_code = bool(getattr(cluster, "allow_remote_code", False))

    def check_credentials(self) -> None:
        """Refuse, before anything is sent, a target whose credential would reach a host it does not belong to."""

    def cluster_key(self) -> str:
        """The key release state and the writer lease are kept under: the cluster's identity when a connection
        names it, else the target kind (``local``)."""
        return self.cluster_identity or self.name

    @abstractmethod
    def model_store_uri(self) -> str:
        """Root URI of the model store (a local directory or an ``s3://`` prefix)."""
