"""Which Serve-config hardware profile a cluster's instances can run, decided from the instances themselves.

Pure: the instance shapes come from EC2's DescribeInstanceTypes (``raylift.hooks.ec2_instance_types``), the
profile's needs from its Serve config (``serve_apps/configs/*.yaml``); nothing here calls AWS or knows a list of
instance types. Three questions:

* ``hardware_class(shape)``: ``neuron`` (Neuron devices), ``gpu`` (NVIDIA GPUs), ``graviton`` (arm64 only), ``cpu``.
* ``default_profile(shapes)``: the profile the ``serve_config`` Param's ``auto`` picks for those instances.
* ``check_profile(name, config, shapes)``: refuse, naming the instance, what it has, what the profile needs and
  what to set, a profile no instance of the cluster can run (a replica's GPUs on one instance, its NeuronCores,
  the image's CPU architecture). A CPU profile on an accelerated instance runs, but leaves the accelerator idle:
  it is returned as a warning, not refused.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from raylift.errors import RayliftValueError

HardwareClass = Literal["neuron", "gpu", "graviton", "cpu"]

#: the ``serve_config`` Param's value meaning "follow the cluster" (also the Param's default)
AUTO = "auto"
#: the profile ``auto`` picks for each class (the local and ``ray`` targets, whose instances raylift cannot see,
#: keep ``cpu``'s)
DEFAULT_PROFILES: dict[HardwareClass, str] = {
    "gpu": "llm-gpu.yaml",
    "neuron": "llm-neuron.yaml",
    "graviton": "llamacpp-graviton.yaml",
    "cpu": "llm-cpu.yaml",
}
#: the more capable class wins when a cluster mixes instances (e.g. a CPU head beside GPU workers)
_RANK: tuple[HardwareClass, ...] = ("neuron", "gpu", "graviton", "cpu")
#: a profile whose file name holds this runs an arm64 image (the ``ray-llamacpp-arm64`` image); the others x86_64
ARM64_PROFILE_MARK = "graviton"


class HardwareProfileError(RayliftValueError):
    """A Serve config's hardware profile cannot run on the cluster's instances (refused before anything is applied)."""


@dataclass(frozen=True)
class InstanceShape:
    """One EC2 instance type as DescribeInstanceTypes describes it (only what the profile check reads)."""

    instance_type: str
    architectures: tuple[str, ...]
    vcpus: int
    memory_mib: int
    gpus: int = 0
    gpu_name: str = ""
    neuron_devices: int = 0
    neuron_cores: int = 0
    neuron_name: str = ""

    @classmethod
    def from_ec2(cls, info: Mapping[str, Any]) -> InstanceShape:
        """From one entry of DescribeInstanceTypes' ``InstanceTypes``."""
        gpus = [g for g in (info.get("GpuInfo") or {}).get("Gpus", []) if g.get("Manufacturer", "NVIDIA") == "NVIDIA"]
        neuron = list((info.get("NeuronInfo") or {}).get("NeuronDevices", []))
        return cls(
            instance_type=str(info["InstanceType"]),
            architectures=tuple(str(a) for a in (info.get("ProcessorInfo") or {}).get("SupportedArchitectures", [])),
            vcpus=int((info.get("VCpuInfo") or {}).get("DefaultVCpus", 0)),
            memory_mib=int((info.get("MemoryInfo") or {}).get("SizeInMiB", 0)),
            gpus=sum(int(g.get("Count", 0)) for g in gpus),
            gpu_name=", ".join(sorted({str(g.get("Name", "")) for g in gpus})),
            neuron_devices=sum(int(d.get("Count", 0)) for d in neuron),
            neuron_cores=sum(int(d.get("Count", 0)) * int((d.get("CoreInfo") or {}).get("Count", 0)) for d in neuron),
            neuron_name=", ".join(sorted({str(d.get("Name", "")) for d in neuron})),
        )

    def describe(self) -> str:
        """What it has, for messages: ``g5.12xlarge (x86_64, 48 vCPUs, 4 NVIDIA A10G GPU(s))``."""
        parts = [", ".join(self.architectures) or "unknown architecture", f"{self.vcpus} vCPUs"]
        if self.gpus:
            parts.append(f"{self.gpus} NVIDIA {self.gpu_name} GPU(s)")
        if self.neuron_devices:
            parts.append(f"{self.neuron_devices} {self.neuron_name} device(s) = {self.neuron_cores} NeuronCores")
        if not self.gpus and not self.neuron_devices:
            parts.append("no GPU or Neuron device")
        return f"{self.instance_type} ({', '.join(parts)})"


def hardware_class(shape: InstanceShape) -> HardwareClass:
    if shape.neuron_cores:
        return "neuron"
    if shape.gpus:
        return "gpu"
    if "arm64" in shape.architectures and "x86_64" not in shape.architectures:
        return "graviton"
    return "cpu"


def cluster_class(shapes: Iterable[InstanceShape]) -> HardwareClass | None:
    """The most capable class among the cluster's instances; None when none is known."""
    classes = {hardware_class(s) for s in shapes}
    return next((c for c in _RANK if c in classes), None)


def default_profile(shapes: Sequence[InstanceShape]) -> str:
    """The profile ``auto`` picks: the one for the cluster's class (``cpu``'s when no instance is known)."""
    return DEFAULT_PROFILES[cluster_class(shapes) or "cpu"]


@dataclass(frozen=True)
class ProfileNeeds:
    """What one replica of a profile needs from a single instance."""

    gpus: int  # NVIDIA GPUs on one instance (its tensor-parallel group, or the replica's own)
    neuron_cores: int  # NeuronCores on one instance
    architecture: str  # the image's CPU architecture: x86_64 or arm64

    @property
    def accelerated(self) -> bool:
        return bool(self.gpus or self.neuron_cores)

    def describe(self) -> str:
        parts = [self.architecture]
        if self.gpus:
            parts.append(f"{self.gpus} NVIDIA GPU(s) on one instance")
        if self.neuron_cores:
            parts.append(f"{self.neuron_cores} NeuronCores on one instance")
        if not self.accelerated:
            parts.append("CPU only")
        return ", ".join(parts)


def _number(value: Any) -> float:
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def profile_needs(name: str, config: Mapping[str, Any]) -> ProfileNeeds:
    """What the first app of Serve config ``config`` (file ``name``) needs of one instance, read off the config:
    ``ray_actor_options`` (``num_gpus``, ``resources.neuron_cores``), the placement group (STRICT_PACK bundles
    share one node; PACK spreads pipeline stages, each a ``tensor_parallel_size`` group on one node)."""
    apps = config.get("applications") or [{}]
    app: Mapping[str, Any] = apps[0]
    engine = (app.get("args") or {}).get("engine_args") or {}
    tp = int(_number(engine.get("tensor_parallel_size")) or 1)
    gpus = neuron = 0.0
    for dep in app.get("deployments") or []:
        actor = dep.get("ray_actor_options") or {}
        dep_gpus = _number(actor.get("num_gpus"))
        dep_neuron = _number((actor.get("resources") or {}).get("neuron_cores"))
        bundles = dep.get("placement_group_bundles") or []
        bundle_gpus = sum(_number(b.get("GPU")) for b in bundles)
        bundle_neuron = sum(_number(b.get("neuron_cores")) for b in bundles)
        if bundle_gpus:
            strict = dep.get("placement_group_strategy") == "STRICT_PACK"
            dep_gpus = max(dep_gpus, bundle_gpus if strict else min(bundle_gpus, tp))
        dep_neuron = max(dep_neuron, bundle_neuron)
        gpus, neuron = max(gpus, dep_gpus), max(neuron, dep_neuron)
    return ProfileNeeds(
        gpus=math.ceil(gpus),
        neuron_cores=math.ceil(neuron),
        architecture="arm64" if ARM64_PROFILE_MARK in name else "x86_64",
    )


def _misfit(needs: ProfileNeeds, shape: InstanceShape) -> str | None:
    """Why one replica cannot run on ``shape``, or None when it can."""
    if needs.architecture not in shape.architectures:
        return f"its image is {needs.architecture}, the instance runs {', '.join(shape.architectures) or 'unknown'}"
    if needs.gpus > shape.gpus:
        return f"a replica needs {needs.gpus} NVIDIA GPU(s) on one instance, it has {shape.gpus}"
    if needs.neuron_cores > shape.neuron_cores:
        return f"a replica needs {needs.neuron_cores} NeuronCores on one instance, it has {shape.neuron_cores}"
    return None


def check_profile(name: str, config: Mapping[str, Any], shapes: Sequence[InstanceShape], *, where: str) -> list[str]:
    """Refuse (HardwareProfileError) profile ``name`` when no instance in ``shapes`` can run one replica of it;
    return warnings (a CPU profile on accelerated instances). ``where``: the cluster, for messages. No shapes: no
    check (the instances are unknown)."""
    if not shapes:
        return []
    needs = profile_needs(name, config)
    reasons = {s.instance_type: _misfit(needs, s) for s in shapes}
    if all(reasons.values()):
        suggestion = default_profile(shapes)
        fits = suggestion != name
        has = "; ".join(f"{s.describe()}: {reasons[s.instance_type]}" for s in shapes)
        raise HardwareProfileError(
            f"serve_config {name!r} cannot run on {where}: it needs {needs.describe()}, and {has}. "
            + (f"Set serve_config to {AUTO!r} (picks {suggestion!r} for these instances) or name a profile that fits"
               if fits else "Name a profile these instances can run")
            + ", or point the target at instances with what the profile needs. Nothing was applied."
        )
    cls = cluster_class(shapes)
    if not needs.accelerated and cls in ("gpu", "neuron"):
        accelerated = [s.describe() for s in shapes if hardware_class(s) == cls]
        return [
            f"serve_config {name!r} runs on CPU only, but {where} has {'; '.join(accelerated)}: the accelerator "
            f"stays idle. Set serve_config to {AUTO!r} ({DEFAULT_PROFILES[cls]!r}) to use it."
        ]
    return []


def resolve_profile(requested: str | None, shapes: Sequence[InstanceShape]) -> tuple[str, bool]:
    """(the profile file name, whether it was picked by ``auto``) for the ``serve_config`` Param's value."""
    value = (requested or "").strip()
    if value in ("", AUTO, "None"):
        return default_profile(shapes), True
    return value.rsplit("/", 1)[-1], False
