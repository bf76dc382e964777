"""``eks``: a RayService (KubeRay) on EKS managed node groups.

Scaling resizes the node groups so the profile's worker pods fit, within each group's ``maxSize`` (what
terraform set; raylift never raises it, and refuses with the numbers before any resize). Before an apply that
replaces the Ray cluster (KubeRay's rule: ``rayClusterConfig`` changed under a ``NewCluster`` upgrade strategy;
``raylift.kuberay.upgrade``) the target checks the node group can hold the peak (old and new clusters side by
side), scaling further when ``maxSize`` allows and refusing with the numbers when it does not. A Serve-config-only
change (a redeploy, rollback or undeploy) is applied in place by KubeRay and leaves the node groups alone. Deploys
render, validate and server-side apply the RayService; the spec it replaced is kept for ``rollback``.
"""

from __future__ import annotations

import logging
import math
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import Field, field_validator, model_validator

from raylift.config import DRAIN_TIMEOUT_S
from raylift.errors import ClusterError, DeployError, RayliftValueError
from raylift.records import ClusterExpectation, ClusterState
from raylift.targets.aws import AwsOptions, AwsTarget, PositiveSeconds
from raylift.targets.eks_blue_green import EksBlueGreen
from raylift.targets.eks_staging import EksStaging
from raylift.targets.scale_in import DrainedScaleIn, ScaleInPlan

if TYPE_CHECKING:
    from raylift.hooks.autoscaling_group import AutoScalingGroupHook
    from raylift.hooks.eks_nodegroup import NodegroupScaling
    from raylift.serve.hardware import InstanceShape
    from raylift.triggers.kube_job import KubeJobDoneTrigger

log = logging.getLogger(__name__)

# A profile's Kubernetes accelerator resource in Ray's name and unit, as KubeRay v1.7 maps a container's limits
# into ``ray start`` (``common/pod.go``: nvidia.com/gpu -> num-gpus; customAcceleratorToRayResourceMap:
# aws.amazon.com/neuroncore -> neuron_cores, one for one). The Serve configs ask Ray for ``neuron_cores``.
RAY_RESOURCES: dict[str, tuple[str, int]] = {
    "nvidia.com/gpu": ("GPU", 1),
    "aws.amazon.com/neuroncore": ("neuron_cores", 1),
}


def ray_resources(accelerator: str | None, devices: float) -> dict[str, float]:
    """``devices`` of a Kubernetes accelerator resource, in Ray's resource name and unit."""
    if accelerator is None:
        return {}
    name, per_device = RAY_RESOURCES.get(accelerator, (accelerator, 1))
    return {name: float(devices * per_device)}


Name = Annotated[str, Field(min_length=1)]


class EksOptions(AwsOptions):
    """The ``eks`` target's ``target_options``: the shared AWS options plus the cluster, node groups and
    RayService. The terraform stack's names ``cluster`` and ``nodegroups`` are refused with raylift's
    (tools/tf_outputs_to_airflow.py picks ``worker_nodegroup`` out of the stack's node groups)."""

    TARGET: ClassVar[str] = "eks"
    RENAMED: ClassVar[dict[str, tuple[str, ...]]] = {
        **AwsOptions.RENAMED,
        "cluster": ("cluster_name",),
        "nodegroups": ("worker_nodegroup",),
    }

    cluster_name: Name = Field(description="the EKS cluster's name")
    worker_nodegroup: Name = Field(description="the managed node group raylift scales for the profile's workers")
    head_nodegroup: Name | None = None
    kubernetes_conn_id: Name | None = None  # None: a kubeconfig is minted from the AWS connection
    namespace: Name = "raylift"
    rayservice_name: Name = "raylift"
    profile: str = "gpu-vllm"
    upgrade_strategy: str = "NewCluster"
    gateway_class: Name | None = None  # NewClusterWithIncrementalUpgrade: the GatewayClass KubeRay's Gateway uses
    accelerators_per_node: Annotated[int, Field(
        ge=1, description="the profile's accelerator on one worker node, in its Kubernetes unit (GPUs; NeuronCores "
        "for inf2: 24 on an inf2.48xlarge); unset: EC2's data for the node group's instance type")] | None = None
    image: Name | None = None
    hf_home: Name | None = None
    model_volume_claim: Name | None = None
    hf_token_secret: Name | None = None
    service_account: Name | None = None
    ray_auth_secret: Name | None = None
    endpoint: Name | None = None
    workers: Annotated[int, Field(ge=0)] = 1
    poll_interval_s: PositiveSeconds = 5.0
    drain_timeout_s: PositiveSeconds = DRAIN_TIMEOUT_S  # a scale-in's Ray drain (the drain Job's deadline)

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str) -> str:
        from raylift.kuberay.profiles import PROFILES

        if value not in PROFILES:
            raise ValueError(f"target option 'profile' got {value!r}: use one of {sorted(PROFILES)}.")
        return value

    @field_validator("upgrade_strategy")
    @classmethod
    def _known_strategy(cls, value: str) -> str:
        from raylift.kuberay.manifest import UPGRADE_STRATEGIES

        if value not in UPGRADE_STRATEGIES:
            raise ValueError(f"target option 'upgrade_strategy' got {value!r}: use one of {list(UPGRADE_STRATEGIES)}.")
        return value

    @model_validator(mode="after")
    def _incremental_needs_a_gateway(self) -> EksOptions:
        from raylift.kuberay.manifest import INCREMENTAL_NEEDS_GATEWAY

        if self.upgrade_strategy == "NewClusterWithIncrementalUpgrade" and not self.gateway_class:
            raise ValueError(f"target option {INCREMENTAL_NEEDS_GATEWAY}")
        return self


class EksTarget(EksBlueGreen, EksStaging, DrainedScaleIn, AwsTarget):
    """Options (all JSON, validated by ``EksOptions``): ``cluster_name``, ``worker_nodegroup``,
    ``head_nodegroup``, ``kubernetes_conn_id`` (None: a kubeconfig is minted from the AWS connection),
    ``namespace``, ``rayservice_name``, ``profile``, ``upgrade_strategy``, ``gateway_class`` (the GatewayClass
    ``NewClusterWithIncrementalUpgrade`` needs), ``accelerators_per_node``, ``image``,
    ``hf_home``, ``model_volume_claim``, ``hf_token_secret``, ``service_account``, ``ray_auth_secret``
    (Kubernetes Secret with the cluster's Ray auth token: the RayService runs token auth), ``endpoint``,
    ``workers`` (fallback when no scale was recorded), ``drain_timeout_s`` (how long a scale-in waits for Ray to
    drain the workers it removes), plus the shared AWS options (``bucket``, ``ecr_repository``, ...).

    A scale-in that removes instances drains first (``raylift.targets.scale_in``, ``raylift.kuberay.drain``): the
    instances and the Ray worker pods on them are picked from the node group's Auto Scaling group and Kubernetes,
    a Job in the cluster has Ray drain those pods' nodes, then KubeRay deletes exactly those pods
    (``workersToDelete``) and exactly those instances are terminated (the desired capacity lowered with them).

    Model staging (target option ``staging``: ``remote``) runs as a Kubernetes Job (``raylift.targets.eks_staging``).

    A blue/green release (the new cluster held beside the serving one until a gate promotes or removes it, then the
    node group restored) is ``raylift.targets.eks_blue_green``'s."""

    name = "eks"

    def __init__(self, **options: Any) -> None:
        """Keyword arguments are the DAG's ``target_options``; refused as a whole before anything is touched."""
        opts = EksOptions.parse(options)
        super().__init__(opts)
        self.options = opts
        self.cluster_name, self.worker_nodegroup = opts.cluster_name, opts.worker_nodegroup
        self.head_nodegroup = opts.head_nodegroup
        self.kubernetes_conn_id, self.namespace = opts.kubernetes_conn_id, opts.namespace
        self.rayservice_name = opts.rayservice_name
        self.profile, self.upgrade_strategy = opts.profile, opts.upgrade_strategy
        self.gateway_class = opts.gateway_class
        self.accelerators_per_node, self.image = opts.accelerators_per_node, opts.image
        self.hf_home, self.model_volume_claim = opts.hf_home, opts.model_volume_claim
        self.hf_token_secret = opts.hf_token_secret
        self.service_account = opts.service_account
        self.ray_auth_secret = opts.ray_auth_secret
        self.endpoint, self.default_workers, self.poll_interval_s = opts.endpoint, opts.workers, opts.poll_interval_s
        self.drain_timeout_s = opts.drain_timeout_s

    # -- hooks -------------------------------------------------------------------------------------
    def _eks(self) -> Any:
        return self._eks_hook

    @cached_property
    def _eks_hook(self) -> Any:  # one client per target instance (a task), not per call
        from raylift.hooks.eks_nodegroup import EksNodegroupHook

        return EksNodegroupHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)

    def region(self) -> str:
        return self.aws.region_name or self._eks().conn_region_name

    def aws_region(self) -> str | None:
        return self.region()

    def _kuberay(self) -> Any:
        return self._kuberay_hook

    @cached_property
    def _kuberay_hook(self) -> Any:
        from raylift.hooks.kuberay import KubeRayHook

        if self.kubernetes_conn_id:
            return KubeRayHook(self.kubernetes_conn_id)
        from raylift.kuberay.eks_auth import eks_kubeconfig

        config = eks_kubeconfig(
            eks_cluster_name=self.cluster_name, region=self.region(), aws_conn_id=self.aws.aws_conn_id
        )
        return KubeRayHook(config_dict=config)

    def pod_cold_start(self, since: float) -> list[dict[str, Any]]:
        """``PodStartReader``: the Ray pods of the RayService's clusters (the active one and, during a blue/green
        release, the pending one) created at or after ``since``, each by phase (``raylift.kuberay.cold_start``)."""
        from raylift.hooks.kuberay_workers import cluster_pod_items
        from raylift.kuberay.cold_start import pods_cold_start

        hook = self._kuberay()
        status = (hook.get_rayservice(self.rayservice_name, self.namespace) or {}).get("status") or {}
        names = {str((status.get(side) or {}).get("rayClusterName") or "")
                 for side in ("activeServiceStatus", "pendingServiceStatus")} - {""}
        items = [pod for name in sorted(names) for pod in cluster_pod_items(hook, self.namespace, name)]
        return pods_cold_start(items, since)

    def _state_key(self, leaf: str) -> str:
        return f"eks/{self.namespace}/{self.rayservice_name}/{leaf}"

    # -- capacity ----------------------------------------------------------------------------------
    def _accelerator(self) -> str | None:
        from raylift.kuberay.profiles import get_profile

        return get_profile(self.profile).accelerator

    def per_node(self) -> int:
        """The profile's accelerator on one worker node, in its Kubernetes unit (GPUs, NeuronCores): the option,
        else EC2's data for the node group's instance type."""
        return self._per_node

    @cached_property
    def _per_node(self) -> int:
        if self.accelerators_per_node is not None:
            return int(self.accelerators_per_node)
        eks = self._eks()
        scaling = eks.scaling(self.cluster_name, self.worker_nodegroup)
        if not scaling.instance_types:
            raise ClusterError(
                f"Node group {self.worker_nodegroup!r} names no instance type: set 'accelerators_per_node'."
            )
        return int(eks.accelerators_per_node(scaling.instance_types[0], self._accelerator()))

    def nodes_for(self, workers: int, strategy: str = "None") -> tuple[int, float]:
        """(worker nodes, accelerators) the profile's ``workers`` pods need at peak for ``strategy``."""
        from raylift.kuberay.manifest import capacity_needed

        accel = self._accelerator()
        if accel is None:  # CPU profiles: one worker pod per node
            factor = 2 if strategy == "NewCluster" else 1
            return workers * factor, 0.0
        amount = capacity_needed(self.profile, workers, strategy).get(accel, 0.0)
        per_node = self.per_node()
        if per_node <= 0:
            raise ClusterError(
                f"Node group {self.worker_nodegroup!r} has no {accel}: pick GPU instances or another profile."
            )
        return math.ceil(amount / per_node), amount

    def instance_shapes(self) -> tuple[InstanceShape, ...]:
        """The worker node group's instance types (DescribeNodegroup's ``instanceTypes``), as EC2's
        DescribeInstanceTypes describes them; empty when the node group names none (its launch template does)."""
        from raylift.hooks.ec2_instance_types import Ec2InstanceTypesHook

        scaling = self._eks().scaling(self.cluster_name, self.worker_nodegroup)
        if not scaling.instance_types:
            log.warning("node group %r names no instance type: the serve_config 'auto' takes the CPU profile",
                        self.worker_nodegroup)
            return ()
        hook = Ec2InstanceTypesHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)
        return hook.shapes(scaling.instance_types)

    def describe_cluster(self) -> str:
        return f"EKS cluster {self.cluster_name!r} (node group {self.worker_nodegroup!r})"

    def _expectation(self, nodes: int, amount: float) -> ClusterExpectation:
        accel = self._accelerator()
        head = 1 if self.head_nodegroup else 0
        resources = ray_resources(accel, nodes * self.per_node()) if accel else {}
        return ClusterExpectation(nodes=nodes + head, resources=resources)

    def scale(self, *, workers: int) -> ClusterExpectation:
        """Size the worker node group for ``workers`` pods (and the head group to 1); refused, with nothing
        resized, when the worker group's maxSize cannot hold them."""
        if workers < 0:
            raise RayliftValueError(f"workers must be >= 0 (got {workers}).")
        nodes, amount = self.nodes_for(workers)
        eks = self._eks()
        self._refuse_beyond_max(workers, nodes, amount, eks.scaling(self.cluster_name, self.worker_nodegroup),
                                strategy="None")
        eks.scale_nodegroup(self.cluster_name, self.worker_nodegroup, nodes)
        if self.head_nodegroup:
            eks.scale_nodegroup(self.cluster_name, self.head_nodegroup, 1)
        self.state_store().write_json(self._state_key("scale.json"), {"workers": workers, "worker_nodes": nodes})
        self.state_store().write_json(self._state_key(self.HEADROOM_RECORD), {})  # this size is the new baseline
        return self._expectation(nodes, amount)

    # -- scale-in: drain in Ray, then remove exactly those pods and instances (raylift.kuberay.drain) ---------------
    @cached_property
    def _asg(self) -> AutoScalingGroupHook:
        from raylift.hooks.autoscaling_group import AutoScalingGroupHook

        return AutoScalingGroupHook(aws_conn_id=self.aws.aws_conn_id, region_name=self.aws.region_name)

    @cached_property
    def _asg_name(self) -> str:
        return str(self._eks().autoscaling_group(self.cluster_name, self.worker_nodegroup))

    def scale_in_plan(self, workers: int) -> ScaleInPlan | None:
        """The worker node group's instances a scale to ``workers`` removes and the Ray worker pods on them; None
        when it removes no instance or no RayService runs yet (the plain ``scale``). ClusterError, with nothing
        changed, when the Auto Scaling group would go below its MinSize or only the head's instance is left."""
        from raylift.hooks.kuberay_workers import active_cluster, cluster_pods
        from raylift.kuberay.drain import plan_removal

        if workers < 0:
            raise RayliftValueError(f"workers must be >= 0 (got {workers}).")
        nodes, _ = self.nodes_for(workers)
        if nodes >= self._eks().scaling(self.cluster_name, self.worker_nodegroup).desired_size:
            return None  # a scale-out or the same size: nothing goes, no Auto Scaling group to read
        group = self._asg.capacity(self._asg_name)
        instances = {i.instance_id: i.private_ip for i in group.in_service()}
        if len(instances) <= nodes:
            return None
        hook = self._kuberay()
        if hook.get_rayservice(self.rayservice_name, self.namespace) is None:
            return None  # no Ray to drain: the plain scale
        remove = len(instances) - nodes
        if group.desired - remove < group.min_size:
            raise ClusterError(
                f"Scaling {self.describe_cluster()} to {workers} worker(s) = {nodes} node(s) removes {remove} of its "
                f"{len(instances)} instance(s), taking Auto Scaling group {group.name!r} from {group.desired} to "
                f"{group.desired - remove}, below its MinSize {group.min_size} (the node group's minSize, set by "
                f"terraform). Nothing was changed. Keep at least {group.min_size} node(s), or lower "
                f"node_groups[{self.worker_nodegroup!r}].min_size in the terraform stack and apply it."
            )
        cluster = active_cluster(hook, self.namespace, self.rayservice_name)
        pods = cluster_pods(hook, self.namespace, cluster["metadata"]["name"])
        removal = plan_removal(pods, instances, workers=workers, nodes=nodes)
        if removal is None:
            return None
        ips = {p.name: p.pod_ip for p in pods}
        return ScaleInPlan(workers, removal.instances, removal.pods, {n: ips.get(n, "") for n in removal.pods},
                           removal.keep)

    def start_drain(self, plan: ScaleInPlan) -> KubeJobDoneTrigger | None:
        """Start the Job that has Ray drain ``plan``'s pods (those with a Ray node: a pod IP) and ends once Ray lists
        them DEAD; the trigger that waits for it (None: no pod to drain)."""
        from raylift.hooks.kuberay_workers import active_cluster, create_job
        from raylift.kuberay.drain import drain_job_name, head_service, render_drain_job, worker_image
        from raylift.triggers.kube_job import KubeJobDoneTrigger

        ips = sorted(ip for ip in plan.node_ips.values() if ip)
        if not ips:
            return None
        hook = self._kuberay()
        cluster = active_cluster(hook, self.namespace, self.rayservice_name)
        name = drain_job_name(cluster["metadata"]["name"], plan.nodes)
        job = render_drain_job(
            name=name, namespace=self.namespace, image=worker_image(cluster),
            head_service=head_service(cluster), pod_ips=ips, deadline_s=int(self.drain_timeout_s),
            message=f"raylift scale-in of {self.describe_cluster()} to {plan.workers} worker(s)",
            ray_auth_secret=self.ray_auth_secret)
        if not create_job(hook, job):
            log.info("drain Job %s/%s exists already (a retried step): waiting on it", self.namespace, name)
        log.info("draining Ray worker pod(s) %s in Job %s/%s before removing them", plan.describe_nodes(),
                 self.namespace, name)
        context = None
        if not self.kubernetes_conn_id:
            from raylift.kuberay.eks_auth import eks_cluster_context

            context = eks_cluster_context(self.cluster_name, self.region(), self.aws.aws_conn_id)
        # the Job's activeDeadlineSeconds ends a drain that overruns; the margin lets its own verdict arrive first
        return KubeJobDoneTrigger(name, self.namespace, kubernetes_conn_id=self.kubernetes_conn_id,
                                  timeout_s=self.drain_timeout_s + 60, poll_interval_s=self.poll_interval_s,
                                  cluster_context=context)

    def remove_members(self, plan: ScaleInPlan) -> None:
        """Have KubeRay delete exactly the drained pods (``workersToDelete``, replicas lowered so none comes back),
        then terminate exactly ``plan.members`` in the node group's Auto Scaling group, lowering its desired
        capacity by as many."""
        from raylift.hooks.kuberay_workers import active_cluster, cluster_pods, patch_cluster
        from raylift.kuberay.drain import workers_to_delete_patch

        hook = self._kuberay()
        cluster = active_cluster(hook, self.namespace, self.rayservice_name)
        name = cluster["metadata"]["name"]
        drained = [p for p in cluster_pods(hook, self.namespace, name) if p.name in plan.nodes and not p.is_head]
        ops = workers_to_delete_patch(cluster, drained)
        if ops:
            patch_cluster(hook, self.namespace, name, ops)
            log.info("RayCluster %s/%s: KubeRay deletes %s", self.namespace, name, ", ".join(p.name for p in drained))
        if plan.members:
            self._asg.terminate(self._asg_name, plan.members)

    def recorded_workers(self) -> int:
        return int((self.state_store().read_json(self._state_key("scale.json")) or {}).get("workers", self.default_workers))

    def _refuse_beyond_max(
        self, workers: int, nodes: int, amount: float, now: NodegroupScaling, *, strategy: str
    ) -> None:
        """ClusterError with the numbers when ``nodes`` exceed the worker group's maxSize (never raised by us)."""
        if nodes <= now.max_size:
            return
        fits = self._workers_that_fit(now.max_size, strategy, workers)
        what = f"{amount:g} {self._accelerator()}" if self._accelerator() else f"{nodes} worker nodes"
        upgrade = strategy != "None"
        fewer = f"Deploy at most {fits} worker(s), or raise" if fits else "Raise"
        if upgrade:
            # KubeRay starts the new cluster beside the old one whatever the release (blue/green holds it; release:
            # direct lets KubeRay switch on health): room for both is the only way through, or an outage
            raise ClusterError(
                f"A {strategy} upgrade of {workers} worker(s) needs {what} = {nodes} node(s) of node group "
                f"{self.worker_nodegroup!r}: for a new rayClusterConfig (a new image, Ray version or pod spec) KubeRay "
                f"starts the new Ray cluster beside the serving one, with release: direct as with blue/green. The group "
                f"allows at most {now.max_size} (its maxSize, set by terraform; now {now.desired_size}); raylift "
                f"never raises maxSize and resized nothing, nothing was applied. {fewer} "
                f"node_groups[{self.worker_nodegroup!r}].max_size to {nodes} in the terraform stack for this release "
                f"(terraform apply; the extra nodes are given back after the switch, and max_size can go back "
                f"after), or take the outage: raylift_teardown, then deploy the new image (nothing serves "
                f"meanwhile). upgrade_strategy 'None' is no way through: KubeRay then keeps the old cluster as it "
                f"is and never rolls the change out."
            )
        raise ClusterError(
            f"This deploy of {workers} worker(s) needs {what} = {nodes} node(s) of node group "
            f"{self.worker_nodegroup!r}, which allows at most {now.max_size} (its maxSize, set by terraform; now "
            f"{now.desired_size}). raylift never raises maxSize and resized nothing. {fewer} "
            f"node_groups[{self.worker_nodegroup!r}].max_size to {nodes} in the terraform stack and apply it."
        )

    def _workers_that_fit(self, max_nodes: int, strategy: str, below: int) -> int:
        """The most workers (< ``below``) whose peak for ``strategy`` fits ``max_nodes`` nodes (bisection)."""
        low, high = 0, below  # invariant: low fits (or is 0), high does not
        while high - low > 1:
            mid = (low + high) // 2
            if self.nodes_for(mid, strategy)[0] <= max_nodes:
                low = mid
            else:
                high = mid
        return low

    def ensure_headroom(self, workers: int, *, new_cluster: bool, strategy: str | None = None) -> None:
        """Make the worker node group big enough for the peak; ClusterError with the numbers when it cannot be.
        The size before a raise is recorded (``headroom.json``; kept across raises until ``scale`` or
        ``restore_node_groups`` sets a new baseline), so ``restore_node_groups`` can give the extra nodes back.

        :param new_cluster: the apply replaces the Ray cluster (``raylift.kuberay.upgrade.starts_new_cluster``),
            so the old one serves beside the new until it is ready. False: the running cluster takes the change
            and the node group is left as the scale step sized it.
        :param strategy: the upgrade the peak is for, when not the target's ``upgrade_strategy`` (a held
            blue/green release runs a whole second cluster: ``NewCluster``)."""
        strategy = (strategy or self.upgrade_strategy) if new_cluster else "None"
        need_nodes, amount = self.nodes_for(workers, strategy)
        now = self._eks().scaling(self.cluster_name, self.worker_nodegroup)
        if need_nodes <= now.desired_size:
            return
        self._refuse_beyond_max(workers, need_nodes, amount, now, strategy=strategy)
        log.info("Scaling %s from %d to %d node(s) for the %s peak", self.worker_nodegroup, now.desired_size, need_nodes, strategy)
        key = self._state_key(self.HEADROOM_RECORD)
        before = (self.state_store().read_json(key) or {}).get("before", now.desired_size)
        self.state_store().write_json(key, {"before": before, "raised_to": need_nodes, "strategy": strategy})
        self._eks().scale_nodegroup(self.cluster_name, self.worker_nodegroup, need_nodes)

    def cluster_state(self) -> ClusterState:
        """Node groups as they stand: ACTIVE groups' desired nodes (UPDATING ones are not counted yet)."""
        eks = self._eks()
        groups = [self.worker_nodegroup] + ([self.head_nodegroup] if self.head_nodegroup else [])
        workers = eks.scaling(self.cluster_name, self.worker_nodegroup)
        nodes = sum(
            s.desired_size for s in (eks.scaling(self.cluster_name, g) for g in groups) if s.status == "ACTIVE"
        )
        ready_workers = workers.desired_size if workers.status == "ACTIVE" else 0
        pods = self._ray_pods(ready_workers)
        resources: dict[str, float] = {}
        for pod in pods:
            for name, amount in pod.items():
                resources[name] = resources.get(name, 0.0) + amount
        accel = self._accelerator()
        if accel:  # the node group's accelerators, whether or not a whole pod fits in what is left
            resources.update(ray_resources(accel, ready_workers * self.per_node()))
        return ClusterState(nodes=nodes, resources=resources, node_resources=pods)

    def _ray_pods(self, worker_nodes: int) -> list[dict[str, float]]:
        """The Ray nodes ``worker_nodes`` nodes of the worker group hold: each worker pod is one Ray node with what
        its profile requests (``gpu-vllm``: 3 CPUs and one GPU a pod, though a g5.12xlarge has 4 GPUs; KubeRay
        passes the limits to ``ray start``), so the fit check places a TP group or a CPU replica on one pod, as
        Ray's scheduler will. As many pods as the nodes' accelerators hold (CPU profiles: one pod a node), at most
        the worker group's maxReplicas."""
        from raylift.kuberay.profiles import get_profile

        profile = get_profile(self.profile)
        accel = profile.accelerator
        left = float(worker_nodes * self.per_node()) if accel else float(worker_nodes)
        pods: list[dict[str, float]] = []
        for group in profile.workers:
            per_pod = group.pod.quantity(accel) if accel else 1.0
            pod = {"CPU": group.pod.quantity("cpu"), **ray_resources(accel, per_pod)}
            while len(pods) < group.max_replicas and per_pod > 0 and left + 1e-9 >= per_pod:
                pods.append(dict(pod))
                left -= per_pod
        return pods

    def billed_nodes(self) -> dict[str, int]:
        """The worker node group's desired size under its instance type, plus the head node group's (if
        any); groups at 0 are left out. A group listing several instance types is counted under the
        first: for On-Demand capacity EKS launches them in that order of priority, so the price is
        approximate when EKS fell back to another type (or, for Spot, picked among them); a warning
        says so."""
        eks = self._eks()
        nodes: dict[str, int] = {}
        for group in [self.worker_nodegroup] + ([self.head_nodegroup] if self.head_nodegroup else []):
            scaling = eks.scaling(self.cluster_name, group)
            if scaling.desired_size <= 0:
                continue
            if not scaling.instance_types:
                raise ClusterError(
                    f"Node group {group!r} names no instance type (its launch template sets it): the price "
                    f"of its {scaling.desired_size} node(s) is unknown."
                )
            first = scaling.instance_types[0]
            if len(scaling.instance_types) > 1:
                log.warning(
                    "Node group %s lists instance types %s: its %d node(s) are priced as %s, the first "
                    "(EKS's On-Demand priority); the cost is approximate.",
                    group, list(scaling.instance_types), scaling.desired_size, first,
                )
            nodes[first] = nodes.get(first, 0) + scaling.desired_size
        return nodes

    # -- serve -------------------------------------------------------------------------------------
    def current_serve_config(self) -> dict[str, Any]:
        import yaml

        obj = self._kuberay().get_rayservice(self.rayservice_name, self.namespace)
        if not obj:
            return {"applications": []}
        return yaml.safe_load(obj["spec"].get("serveConfigV2") or "") or {"applications": []}

    def render(self, config: dict[str, Any], workers: int) -> dict[str, Any]:
        from raylift.kuberay.manifest import render_rayservice

        manifest = render_rayservice(
            name=self.rayservice_name,
            namespace=self.namespace,
            serve_config=config,
            image=self.image or self.image_uri(),
            profile=self.profile,
            workers=workers,
            hf_home=self.hf_home,
            upgrade_strategy=self.upgrade_strategy,
            hf_token_secret=self.hf_token_secret,
            model_volume_claim=self.model_volume_claim,
            service_account=self.service_account,
            ray_auth_secret=self.ray_auth_secret,
            gateway_class=self.gateway_class,
        )
        return manifest

    def _bound_max_replicas(self, manifest: dict[str, Any], workers: int) -> None:
        """KubeRay's in-tree autoscaler may grow a worker group to its ``maxReplicas``, but the node group never
        grows past its maxSize (no cluster autoscaler moves it; raylift sizes it): a pod beyond what maxSize holds
        stays Pending for good, and Serve waits on a replica that never starts. So each group's ``maxReplicas`` is
        bounded by the most workers ``maxSize`` nodes hold (``nodes_for``), never below ``workers`` (what runs
        now; more than fits is refused by the scale step). KubeRay's cluster hash leaves ``maxReplicas`` out
        (``GenerateHashWithoutReplicasAndWorkersToDelete``), so the bound never starts a new cluster."""
        groups = manifest["spec"]["rayClusterConfig"].get("workerGroupSpecs") or []
        if not groups:
            return
        max_nodes = self._eks().scaling(self.cluster_name, self.worker_nodegroup).max_size
        for group in groups:
            asked = int(group.get("maxReplicas", workers))
            if asked <= workers or self.nodes_for(asked)[0] <= max_nodes:
                continue
            fits = self._workers_that_fit(max_nodes, "None", asked)
            bound = max(workers, fits)
            log.info("worker group %s: maxReplicas %d bounded to %d (node group %s holds at most %d node(s))",
                     group.get("groupName"), asked, bound, self.worker_nodegroup, max_nodes)
            group["maxReplicas"] = bound

    def apply_serve_config(self, config: dict[str, Any]) -> None:
        """Render, have the API server validate it (dry run), check headroom, keep the spec being replaced,
        then server-side apply. A refused manifest changes nothing that serves.

        Headroom for two clusters only when KubeRay will start a new one: the dry run's answer (the spec as the
        API server would store it, defaults filled in) is compared with the live spec by KubeRay's own rules."""
        workers = self.recorded_workers()
        manifest = self.render(config, workers)
        self._bound_max_replicas(manifest, workers)
        hook = self._kuberay()
        would_be = hook.apply_rayservice(manifest, dry_run=True)
        previous = hook.get_rayservice(self.rayservice_name, self.namespace)
        self._headroom_for(workers, previous, would_be)
        if previous is not None:
            self.state_store().write_json(self._state_key("previous.json"), previous)
        self._apply_unless_changed(hook, manifest, previous)

    def _apply_unless_changed(self, hook: Any, manifest: dict[str, Any], previous: dict[str, Any] | None) -> None:
        """Apply with the resourceVersion of ``previous``: a spec changed since is a conflict (409, raised), never
        overwritten. KubeRay's own status writes change the resourceVersion too, so a 409 whose object has the
        same spec as ``previous`` is retried with the new version."""
        from raylift.hooks.kuberay import RayServiceConflictError

        for _ in range(5):
            version = ((previous or {}).get("metadata") or {}).get("resourceVersion")
            try:
                hook.apply_rayservice(manifest, resource_version=version)
                return
            except RayServiceConflictError:
                now = hook.get_rayservice(self.rayservice_name, self.namespace)
                if previous is None or now is None or now.get("spec") != previous.get("spec"):
                    raise
                previous = now  # only the status moved: same spec, newer version
        hook.apply_rayservice(manifest, resource_version=((previous or {}).get("metadata") or {}).get("resourceVersion"))

    def rollback(self) -> None:
        """Re-apply the RayService spec that the last apply replaced (headroom as for any apply: two clusters
        only when that spec's ``rayClusterConfig`` differs from the live one)."""
        from raylift.kuberay.manifest import to_apply_config

        previous = self.state_store().read_json(self._state_key("previous.json"))
        if not previous:
            raise DeployError(
                f"No previous RayService spec recorded for {self.namespace}/{self.rayservice_name}: nothing to roll back to."
            )
        hook = self._kuberay()
        live = hook.get_rayservice(self.rayservice_name, self.namespace)
        self._headroom_for(self.recorded_workers(), live, to_apply_config(previous))
        hook.rollback_rayservice(previous)

    def _headroom_for(self, workers: int, live: dict[str, Any] | None, new: dict[str, Any]) -> None:
        """``ensure_headroom`` for replacing the ``live`` RayService (None: none yet) with ``new``."""
        from raylift.kuberay.upgrade import cluster_change, starts_new_cluster

        live_spec = live.get("spec") if live else None
        new_spec = new.get("spec") or {}
        replaces = starts_new_cluster(live_spec, new_spec)
        log.info("RayService %s/%s: cluster change %s, %s", self.namespace, self.rayservice_name,
                 cluster_change(live_spec, new_spec).value,
                 "a new Ray cluster beside the old one" if replaces else "the running cluster takes it")
        self.ensure_headroom(workers, new_cluster=replaces)

    def deploy_trigger(self, *, app_names: list[str], timeout_s: float, optional: bool = False) -> Any:
        """``optional`` changes nothing here: the RayService's status carries no Serve scheduling message, so an
        optional app's wait ends at ``timeout_s`` (the caller bounds it)."""
        from raylift.triggers.rayservice import RayServiceReadyTrigger

        context = None
        if not self.kubernetes_conn_id:
            from raylift.kuberay.eks_auth import eks_cluster_context

            context = eks_cluster_context(self.cluster_name, self.region(), self.aws.aws_conn_id)
        return RayServiceReadyTrigger(
            name=self.rayservice_name,
            namespace=self.namespace,
            kubernetes_conn_id=self.kubernetes_conn_id,
            app_names=app_names,
            timeout_s=timeout_s,
            poll_interval_s=self.poll_interval_s,
            cluster_context=context,
        )

    def endpoint_url(self) -> str:
        default = f"http://{self.rayservice_name}-serve-svc.{self.namespace}.svc.cluster.local:8000"
        return (self.endpoint or default).rstrip("/")

    def teardown(self) -> None:
        self._kuberay().delete_rayservice(self.rayservice_name, self.namespace)
        eks = self._eks()
        eks.scale_nodegroup(self.cluster_name, self.worker_nodegroup, 0)
        if self.head_nodegroup:
            eks.scale_nodegroup(self.cluster_name, self.head_nodegroup, 0)
