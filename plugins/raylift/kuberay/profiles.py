"""Node / worker-group profiles for RayServices on EKS, as data (one per seed case).

A profile says where Ray pods land (nodeSelector, instance types, tolerations, scheduler), what
each pod requests, and which accelerator Ray sees. ``render_rayservice`` turns a profile plus a
worker count into ``rayClusterConfig``; ``capacity_needed`` turns it into totals the EKS target
compares with node-group headroom.

One owner per pool: worker pods run only on the managed node group raylift resizes for them (nodeSelector
``raylift.io/nodegroup: <nodegroup>``, the label terraform's eks_ray module puts on each managed group), never on a
Karpenter NodePool, so Karpenter and raylift never both add nodes for the same pods; heads run only on Karpenter's
``ray-head`` NodePool (``karpenter.sh/nodepool: ray-head``), never on a worker group raylift scales to 0.

- ``gpu-vllm``: vLLM on NVIDIA A10G/L4 workers (g5/g6) of the managed group ``gpu``, one ``nvidia.com/gpu`` per
  worker pod; the head on an amd64 CPU node (Karpenter pool ``ray-head``).
- ``graviton``: llama.cpp on Graviton (seed 001): one c7g/c8g.8xlarge of the managed group ``graviton``
  (label ``model-inferencing: cpu-arm``) per worker pod, CPU only; the head on an arm64 node of Karpenter's
  ``ray-head`` pool. Never the ``system`` node group Karpenter itself runs on.
- ``inf2``: vLLM on Inferentia2 (seed 004): TP=8 = 8 NeuronCores (``aws.amazon.com/neuroncore: 8``, 4 devices of
  2 cores) per pod, three pods per inf2.48xlarge, placed by the Neuron scheduler extension (``my-scheduler``);
  the Neuron compile cache on the node's disk (``NEURON_COMPILE_CACHE``), shared by the node's pods and kept
  across restarts. Cores, not whole devices (``aws.amazon.com/neuron``): KubeRay v1.7 turns only a container's
  ``aws.amazon.com/neuroncore`` into Ray's ``neuron_cores`` (``ray-operator/controllers/ray/common/pod.go``,
  ``customAcceleratorToRayResourceMap``), which is what the Serve config's replicas ask Ray for; the Neuron device
  plugin registers both (AWS Neuron docs, "Neuron device plugin": neuroncore allocates cores, neuron whole devices).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raylift.errors import RayliftValueError

GPU_RESOURCE = "nvidia.com/gpu"
NEURON_RESOURCE = "aws.amazon.com/neuron"  # whole devices; also the Neuron node group's taint key (terraform)
NEURONCORE_RESOURCE = "aws.amazon.com/neuroncore"  # NeuronCores: what KubeRay maps to Ray's neuron_cores


class UnknownProfileError(RayliftValueError):
    """The ``profile`` names no KubeRay node profile."""


@dataclass(frozen=True)
class NodeCache:
    """A folder on the node's own disk mounted into the pod (a ``hostPath`` volume): it outlives the pod (a
    restarted or replaced pod on the node finds it) and is shared by the pods of one node. kubelet creates a
    missing one root-owned (0755), so an init container hands it to the image's user (``owner``) first."""

    name: str  # the volume's name
    node_path: str  # on the node (its root EBS volume: the node group's disk_size_gb in terraform)
    mount_path: str  # in the Ray container
    owner: str  # uid:gid of the image's USER


@dataclass(frozen=True)
class PodProfile:
    """What one Ray pod requests and where it may run (requests == limits: Guaranteed QoS)."""

    resources: dict[str, str]
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, str], ...] = ()
    instance_types: tuple[str, ...] = ()  # rendered as a required node affinity when non-empty
    scheduler_name: str | None = None
    ray_start_params: dict[str, str] = field(default_factory=dict)
    node_caches: tuple[NodeCache, ...] = ()

    def quantity(self, resource: str) -> float:
        """A resource request as a number (cores, GiB for memory, devices)."""
        return parse_quantity(self.resources.get(resource, "0"), memory=resource == "memory")


@dataclass(frozen=True)
class WorkerGroupProfile:
    """A KubeRay worker group: the pod plus the autoscaler's bounds."""

    group_name: str
    pod: PodProfile
    min_replicas: int = 0
    max_replicas: int = 4


@dataclass(frozen=True)
class NodeProfile:
    """Head pod + worker groups for one hardware / engine case."""

    name: str
    engine: str
    description: str
    head: PodProfile
    workers: tuple[WorkerGroupProfile, ...]
    accelerator: str | None = None  # Kubernetes extended resource name, if any
    tensor_parallel_size: int = 1
    env: dict[str, str] = field(default_factory=dict)
    nodegroup: str = ""  # key of its managed node group in terraform/examples/eks (output eks_nodegroups)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for docs, XCom and the EKS target's headroom report)."""
        from dataclasses import asdict

        return asdict(self)


_HEAD_RAY_PARAMS = {"dashboard-host": "0.0.0.0", "num-cpus": "0"}  # head: control plane, no replicas

# The Neuron compiler's cache (NEFFs by graph hash; NxD Inference compiles the model at every engine start and
# finds its graphs here): the ray-neuron image's NEURON_COMPILE_CACHE_URL, the Neuron SDK's default folder. On
# the node's disk, not under the model mount (read-only on EKS) nor in the container (gone with the pod), so a
# replaced pod, and the other two TP=8 pods of an inf2.48xlarge, reuse what the first one compiled.
NEURON_COMPILE_CACHE = NodeCache(
    name="neuron-compile-cache",
    node_path="/var/lib/raylift/neuron-compile-cache",
    mount_path="/var/tmp/neuron-compile-cache",
    owner="1000:100",  # images/ray-neuron/Dockerfile: USER 1000:100
)

# Heads of the amd64 profiles: the terraform EKS example's Karpenter NodePool "ray-head" (small, untainted
# amd64). Every amd64 node group is tainted for its accelerator, so a head selecting only the arch stayed Pending.
_AMD64_HEAD_SELECTOR = {"kubernetes.io/arch": "amd64", "karpenter.sh/nodepool": "ray-head"}
_ARM64_HEAD_SELECTOR = {"kubernetes.io/arch": "arm64", "karpenter.sh/nodepool": "ray-head"}
# The label terraform's eks_ray module puts on each managed node group's nodes (its key): a worker pod selects its
# profile's group by it (``render_rayservice``), so no Karpenter NodePool can provision for it.
NODEGROUP_LABEL = "raylift.io/nodegroup"

# The GPU instance types a worker pod takes: the managed group ``gpu``'s (g5.12xlarge in terraform's default) or
# another of these where the stack's node_groups override names it.
_GPU_TYPES = (
    "g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.12xlarge",
    "g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6.8xlarge", "g6.12xlarge",
)  # fmt: skip

PROFILES: dict[str, NodeProfile] = {
    "gpu-vllm": NodeProfile(
        name="gpu-vllm",
        engine="vllm",
        description="vLLM on g5 (A10G) / g6 (L4) workers, one GPU per worker pod",
        head=PodProfile(
            resources={"cpu": "2", "memory": "8Gi"},
            node_selector=_AMD64_HEAD_SELECTOR,
            ray_start_params=_HEAD_RAY_PARAMS,
        ),
        workers=(
            WorkerGroupProfile(
                group_name="gpu",
                min_replicas=0,
                max_replicas=8,
                pod=PodProfile(
                    resources={"cpu": "3", "memory": "14Gi", GPU_RESOURCE: "1"},
                    node_selector={"kubernetes.io/arch": "amd64"},
                    instance_types=_GPU_TYPES,
                    tolerations=({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},),
                ),
            ),
        ),
        accelerator=GPU_RESOURCE,
        nodegroup="gpu",
    ),
    "graviton": NodeProfile(
        name="graviton",
        engine="llama.cpp",
        description="llama.cpp on Graviton (c7g/c8g.8xlarge) of the managed cpu-arm node group (seed 001)",
        head=PodProfile(
            resources={"cpu": "2", "memory": "8Gi"},
            node_selector=_ARM64_HEAD_SELECTOR,
            ray_start_params=_HEAD_RAY_PARAMS,
        ),
        workers=(
            WorkerGroupProfile(
                group_name="cpu-arm",
                min_replicas=0,
                max_replicas=10,  # seed 001 benchmarks 10 worker pods
                pod=PodProfile(
                    # an 8xlarge (32 vCPU, 64 GiB) per pod, leaving room for kubelet and daemonsets
                    resources={"cpu": "30", "memory": "56Gi"},
                    node_selector={"kubernetes.io/arch": "arm64", "model-inferencing": "cpu-arm"},
                    instance_types=("c7g.8xlarge", "c8g.8xlarge"),
                ),
            ),
        ),
        env={"OMP_NUM_THREADS": "30"},
        nodegroup="graviton",
    ),
    # the x86 side of seed 001's Graviton-vs-x86 comparison: the same llama.cpp pods on Intel 8xlarge workers
    "cpu-x86": NodeProfile(
        name="cpu-x86",
        engine="llama.cpp",
        description="llama.cpp on Intel x86 (c7i.8xlarge) of the managed x86 node group (seed 001's comparison)",
        head=PodProfile(
            resources={"cpu": "2", "memory": "8Gi"},
            node_selector=_AMD64_HEAD_SELECTOR,
            ray_start_params=_HEAD_RAY_PARAMS,
        ),
        workers=(
            WorkerGroupProfile(
                group_name="cpu-x86",
                min_replicas=0,
                max_replicas=10,  # as many pods as the Graviton side
                pod=PodProfile(
                    resources={"cpu": "30", "memory": "56Gi"},  # an 8xlarge, as graviton's
                    node_selector={"kubernetes.io/arch": "amd64", "model-inferencing": "cpu-x86"},
                    instance_types=("c7i.8xlarge",),
                ),
            ),
        ),
        env={"OMP_NUM_THREADS": "30"},
        nodegroup="x86",
    ),
    "inf2": NodeProfile(
        name="inf2",
        engine="vllm-neuron",
        description="vLLM on Inferentia2 (inf2.48xlarge), TP=8 over 8 NeuronCores (4 devices) per pod (seed 004)",
        head=PodProfile(
            resources={"cpu": "2", "memory": "8Gi"},
            node_selector=_AMD64_HEAD_SELECTOR,
            ray_start_params=_HEAD_RAY_PARAMS,
        ),
        workers=(
            WorkerGroupProfile(
                group_name="neuron",
                min_replicas=0,
                max_replicas=3,  # three TP=8 pods fill one inf2.48xlarge (12 devices, 24 cores)
                pod=PodProfile(
                    resources={"cpu": "60", "memory": "240Gi", NEURONCORE_RESOURCE: "8"},
                    node_selector={"node.kubernetes.io/instance-type": "inf2.48xlarge"},
                    tolerations=({"key": NEURON_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},),
                    scheduler_name="my-scheduler",  # Neuron scheduler extension: contiguous cores
                    node_caches=(NEURON_COMPILE_CACHE,),
                ),
            ),
        ),
        accelerator=NEURONCORE_RESOURCE,
        tensor_parallel_size=8,
        env={"NEURON_RT_NUM_CORES": "8", "NEURON_COMPILE_CACHE_URL": NEURON_COMPILE_CACHE.mount_path},
        nodegroup="inferentia",
    ),
}


def get_profile(name: str) -> NodeProfile:
    """The profile called ``name``, or an error listing the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise UnknownProfileError(
            f"Unknown KubeRay profile {name!r}; choose one of {sorted(PROFILES)}."
        ) from None


def parse_quantity(value: str | int | float, *, memory: bool = False) -> float:
    """A Kubernetes quantity as a float (kubernetes' own parser: every suffix the API server takes, and a
    ValueError naming a bad one); memory in GiB so totals stay readable."""
    from kubernetes.utils.quantity import parse_quantity as k8s_quantity  # lazy: the client is heavy

    number = float(k8s_quantity(value))
    return number / 2**30 if memory else number
