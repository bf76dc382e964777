"""The nodes the terraform EKS example can give a pod, read from its HCL (no terraform binary, no cluster).

Managed node groups (``var.node_groups`` of modules/eks_ray, or the example's override) and Karpenter NodePools
(``local.node_pools``) become candidate nodes: one per instance type a pool may launch, with the labels and
taints the node would carry and its allocatable resources. Instance facts come from EC2's published instance
specs (``INSTANCE_TYPES``), allocatable from EKS's reserve formula (the AL2023 AMI's kube-reserved), minus a
margin for the DaemonSets every node runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.infra.terraform_model import TerraformModule, blocks, unquote

ROOT = Path(__file__).resolve().parents[2]
EKS_MODULE = ROOT / "terraform" / "modules" / "eks_ray"
EKS_EXAMPLE = ROOT / "terraform" / "examples" / "eks"
GPU, NEURON, NEURONCORE = "nvidia.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore"
# NeuronCores on one Inferentia2 device (EC2's inf2 page: 2 NeuronCores-v2 each); the Neuron device plugin registers
# both resources in node allocatable: whole devices (aws.amazon.com/neuron) and cores (aws.amazon.com/neuroncore)
CORES_PER_INF2_DEVICE = 2

# instance type -> (vCPU, memory GiB, NVIDIA GPUs, Neuron devices), from the EC2 instance type pages
INSTANCE_TYPES: dict[str, tuple[int, int, int, int]] = {
    **{f"g5.{s}": (c, m, g, 0) for s, c, m, g in [
        ("xlarge", 4, 16, 1), ("2xlarge", 8, 32, 1), ("4xlarge", 16, 64, 1), ("8xlarge", 32, 128, 1),
        ("12xlarge", 48, 192, 4), ("16xlarge", 64, 256, 1), ("24xlarge", 96, 384, 4), ("48xlarge", 192, 768, 8)]},
    **{f"g6.{s}": (c, m, g, 0) for s, c, m, g in [
        ("xlarge", 4, 16, 1), ("2xlarge", 8, 32, 1), ("4xlarge", 16, 64, 1), ("8xlarge", 32, 128, 1),
        ("12xlarge", 48, 192, 4), ("16xlarge", 64, 256, 1), ("24xlarge", 96, 384, 4), ("48xlarge", 192, 768, 8)]},
    **{f"g6e.{s}": (c, m, g, 0) for s, c, m, g in [
        ("xlarge", 4, 32, 1), ("2xlarge", 8, 64, 1), ("4xlarge", 16, 128, 1), ("8xlarge", 32, 256, 1),
        ("12xlarge", 48, 384, 4), ("16xlarge", 64, 512, 1), ("24xlarge", 96, 768, 4), ("48xlarge", 192, 1536, 8)]},
    **{f"{fam}.{s}": (c, m, 0, 0) for fam in ("c7g", "c8g", "c7i") for s, c, m in [
        ("large", 2, 4), ("xlarge", 4, 8), ("2xlarge", 8, 16), ("4xlarge", 16, 32), ("8xlarge", 32, 64),
        ("12xlarge", 48, 96), ("16xlarge", 64, 128)]},
    **{f"{fam}.{s}": (c, m, 0, 0) for fam in ("m7g", "m7i", "m6i") for s, c, m in [
        ("large", 2, 8), ("xlarge", 4, 16), ("2xlarge", 8, 32), ("4xlarge", 16, 64), ("8xlarge", 32, 128)]},
    **{f"inf2.{s}": (c, m, 0, n) for s, c, m, n in [
        ("xlarge", 4, 16, 1), ("8xlarge", 32, 128, 1), ("24xlarge", 96, 384, 6), ("48xlarge", 192, 768, 12)]},
}
ARM_FAMILIES = {"c7g", "c8g", "m7g"}
AMI_ARCH = {"AL2023_x86_64_NVIDIA": "amd64", "AL2023_x86_64_NEURON": "amd64", "AL2023_x86_64_STANDARD": "amd64",
            "AL2023_ARM_64_STANDARD": "arm64", "AL2023_ARM_64_NVIDIA": "arm64"}
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def arch_of(instance_type: str) -> str:
    return "arm64" if instance_type.split(".")[0] in ARM_FAMILIES else "amd64"


def allocatable(instance_type: str) -> dict[str, float]:
    """Node allocatable: capacity minus EKS's kube-reserved/eviction reserve and ~0.2 CPU / 0.5 GiB of DaemonSets."""
    cpu, mem, gpus, neuron = INSTANCE_TYPES[instance_type]
    reserved_cpu = 0.06 + 0.01 * (cpu >= 2) + 0.005 * min(max(cpu - 2, 0), 2) + 0.0025 * max(cpu - 4, 0)
    max_pods = 110 if cpu < 32 else (234 if cpu < 96 else 737)
    reserved_mem = (255 + 11 * max_pods + 100) / 1024
    out = {"cpu": cpu - reserved_cpu - 0.2, "memory": mem - reserved_mem - 0.5}
    if gpus:
        out[GPU] = gpus
    if neuron:
        out[NEURON] = neuron
        out[NEURONCORE] = neuron * CORES_PER_INF2_DEVICE
    return out


@dataclass(frozen=True)
class Node:
    instance_type: str
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...]
    allocatable: dict[str, float]


@dataclass
class Pool:
    """A managed node group (raylift may resize it) or a Karpenter NodePool (Karpenter sizes it)."""

    name: str
    kind: str  # "nodegroup" | "nodepool"
    nodes: list[Node]
    max_nodes: int | None = None  # node group max_size
    limits: dict[str, float] = field(default_factory=dict)  # NodePool limits (sum of node capacity)
    system: bool = False  # runs the cluster's own controllers (Karpenter): never resized by raylift

    def max_pods(self, fits_one_node: int, node: Node) -> int:
        """How many pods (``fits_one_node`` per node) the pool can hold at its bounds."""
        if self.max_nodes is not None:
            return self.max_nodes * fits_one_node
        cap = INSTANCE_TYPES[node.instance_type]
        per_node = {"cpu": cap[0], GPU: cap[2], NEURON: cap[3], NEURONCORE: cap[3] * CORES_PER_INF2_DEVICE}
        nodes = min((int(limit // per_node[k]) for k, limit in self.limits.items() if per_node.get(k)), default=10**6)
        return nodes * fits_one_node


def _py(value: Any, variables: dict[str, Any]) -> Any:
    """hcl2's parse -> plain Python: quotes off, ``${var.x}`` resolved to the variable's default."""
    if isinstance(value, str):
        match = re.fullmatch(r"\$\{var\.(\w+)\}", value)
        if match:
            return _py(variables[match[1]]["default"], variables)
        return unquote(value)
    if isinstance(value, dict):
        return {unquote(k): _py(v, variables) for k, v in value.items() if k != "__is_block__"}
    if isinstance(value, list):
        return [_py(v, variables) for v in value]
    return value


def _system_selector(module: TerraformModule) -> dict[str, str]:
    """Karpenter's own nodeSelector (its helm values): the nodes it runs on are the system pool."""
    text = (module.path / "karpenter.tf").read_text()
    match = re.search(r'nodeSelector\s*=\s*\{\s*"([^"]+)"\s*=\s*"([^"]+)"\s*\}', text)
    assert match, "karpenter's helm values name no nodeSelector"
    return {match[1]: match[2]}


def schedulers(module: TerraformModule | None = None) -> set[str]:
    """Scheduler names pods may use: the default one, and the Neuron scheduler extension when the neuron chart
    enables it (AWS's Neuron docs: its pods set ``schedulerName: my-scheduler``)."""
    module = module or TerraformModule.load(EKS_MODULE)
    names = {"default-scheduler"}
    if re.search(r"scheduler\s*=\s*\{\s*enabled\s*=\s*true\s*\}", (module.path / "devices.tf").read_text()):
        names.add("my-scheduler")
    return names


def pools() -> list[Pool]:
    """Every pool of the EKS example: its managed node groups, then its Karpenter NodePools."""
    module = TerraformModule.load(EKS_MODULE)
    example = TerraformModule.load(EKS_EXAMPLE)
    variables = module.variables
    ray_call = next(body for doc in example.docs.values() for name, body in blocks(doc, "module") if name == "ray")
    node_groups = _py(ray_call.get("node_groups", variables["node_groups"]["default"]), variables)
    system = _system_selector(module)
    found: list[Pool] = []
    for key, group in node_groups.items():
        arch = AMI_ARCH[group["ami_type"]]
        labels = {**group.get("labels", {}), "raylift.io/nodegroup": key}
        taints = tuple({"key": t["key"], "value": t["value"], "effect": EFFECTS[t["effect"]]} for t in group.get("taints", []))
        nodes = [
            Node(it, {**labels, "kubernetes.io/arch": arch, "node.kubernetes.io/instance-type": it,
                      "eks.amazonaws.com/nodegroup": key}, taints, allocatable(it))
            for it in group["instance_types"]
        ]
        is_system = all(labels.get(k) == v for k, v in system.items())
        found.append(Pool(key, "nodegroup", nodes, max_nodes=int(group["max_size"]), system=is_system))
    for doc in module.docs.values():
        for entry in doc.get("locals", []):
            for name, spec in _py(entry.get("node_pools", {}), variables).items():
                requirements = {r["key"]: set(r["values"]) for r in spec["requirements"] if r["operator"] == "In"}
                families = requirements.get("karpenter.k8s.aws/instance-family", set())
                arches = requirements.get("kubernetes.io/arch", {"amd64", "arm64"})
                nodes = [
                    Node(it, {**spec["labels"], "karpenter.sh/nodepool": name, "kubernetes.io/arch": arch_of(it),
                              "karpenter.k8s.aws/instance-family": it.split(".")[0],
                              "node.kubernetes.io/instance-type": it},
                         tuple(spec["taints"]), allocatable(it))
                    for it in INSTANCE_TYPES
                    if it.split(".")[0] in families and arch_of(it) in arches
                ]
                limits = {k: float(v) for k, v in spec.get("limits", {}).items()}
                found.append(Pool(f"karpenter/{name}", "nodepool", nodes, limits=limits))
    return found
