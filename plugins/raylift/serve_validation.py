"""Can this Serve app run on this cluster? Checked by the deploy step before anything is applied.

Serve accepts a config it cannot place and leaves the replicas PENDING until the deploy times out
(or, worse, half of an update stuck while the rest is serving). So before applying, raylift checks:

* the schema of what it is about to apply (replica counts, autoscaling bounds, resources, placement
  group bundles/strategy, that the replica fits bundle 0 of its placement group);
* for vLLM, that the parallel sizes match the resources: tensor_parallel_size x
  pipeline_parallel_size GPU workers = the replica's GPUs; NeuronCores = tensor_parallel_size;
* the cluster: the replicas' accelerators (and CPUs, where the cluster reports them) within the
  totals left by the other apps, and, where the cluster reports its nodes, per node: a TP group
  within one node (TP <= GPUs per node), PP stages on enough nodes, STRICT_PACK on one node.

Every refusal names the numbers (needed vs available) and what to change. Only conditions that are
certain to fail are refused; an autoscaling ceiling above the cluster's size is a warning (a cloud
cluster may grow).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from raylift.errors import ServeFitError

ACCELERATORS = ("GPU", "neuron_cores")
STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
EPS = 1e-9


@dataclass(frozen=True)
class Cluster:
    """What the cluster has: resource totals and, when known, each node's resources."""

    totals: dict[str, float]
    nodes: tuple[dict[str, float], ...] = ()  # empty: per-node checks are skipped


@dataclass(frozen=True)
class ReplicaNeeds:
    """What one deployment asks for: replicas to place now, the ceiling, and one replica's bundles."""

    deployment: str
    replicas: int
    max_replicas: int
    bundles: tuple[dict[str, float], ...]  # one dict for a plain actor, else the placement group's
    strategy: str | None = None  # placement group strategy; None = plain actor
    cpus_known: bool = True  # False: the config does not say (the code's default applies)

    def per_replica(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for bundle in self.bundles:
            for name, amount in bundle.items():
                out[name] = out.get(name, 0.0) + amount
        return out


@dataclass
class FitReport:
    """What was checked, for the task log; ``warnings`` are not refusals."""

    lines: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _num(value: Any, what: str, problems: list[str], *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        problems.append(f"{what} must be a number >= {minimum:g}, got {value!r}")
        return 0.0
    return float(value)


def _resources(options: dict[str, Any], where: str, problems: list[str]) -> dict[str, float]:
    """``ray_actor_options`` as one resource dict (CPU, GPU, custom resources such as neuron_cores)."""
    out: dict[str, float] = {}
    if "num_cpus" in options:
        out["CPU"] = _num(options["num_cpus"], f"{where}.num_cpus", problems)
    if "num_gpus" in options:
        gpus = _num(options["num_gpus"], f"{where}.num_gpus", problems)
        if gpus > 1 and not float(gpus).is_integer():
            problems.append(
                f"{where}.num_gpus {gpus:g}: Ray shares a GPU only in fractions < 1; use a whole number"
            )
        out["GPU"] = gpus
    custom = options.get("resources") or {}
    if not isinstance(custom, dict):
        problems.append(f"{where}.resources must be a mapping of resource name to amount")
        custom = {}
    for name, amount in custom.items():
        out[str(name)] = _num(amount, f"{where}.resources.{name}", problems)
    return {k: v for k, v in out.items() if v > 0 or k == "CPU"}


def _replica_counts(dep: dict[str, Any], where: str, problems: list[str]) -> tuple[int, int]:
    """(replicas Serve must place before the app is RUNNING, replicas it may scale up to)."""
    auto = dep.get("autoscaling_config")
    count = dep.get("num_replicas")
    if auto is None:
        if count is None:
            return 1, 1
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            problems.append(f"{where}.num_replicas must be an integer >= 0, got {count!r}")
            return 0, 0
        return count, count
    if not isinstance(auto, dict):
        problems.append(f"{where}.autoscaling_config must be a mapping")
        return 0, 0
    if count not in (None, "auto"):
        problems.append(f"{where} sets both num_replicas ({count}) and autoscaling_config: keep one")
    low, high = auto.get("min_replicas", 1), auto.get("max_replicas", 1)
    initial = auto.get("initial_replicas")
    for key, value in (("min_replicas", low), ("max_replicas", high), ("initial_replicas", initial)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append(f"{where}.autoscaling_config.{key} must be an integer >= 0, got {value!r}")
            return 0, 0
    if high < 1 or low > high:
        problems.append(
            f"{where}.autoscaling_config: need 0 <= min_replicas ({low}) <= max_replicas ({high}), max >= 1"
        )
    if initial is not None and not low <= initial <= high:
        problems.append(f"{where}.autoscaling_config.initial_replicas {initial} is outside [{low}, {high}]")
    target = auto.get("target_ongoing_requests", 2)
    if _num(target, f"{where}.autoscaling_config.target_ongoing_requests", problems) <= 0:
        problems.append(f"{where}.autoscaling_config.target_ongoing_requests must be > 0")
    limit = dep.get("max_ongoing_requests")
    if (
        isinstance(limit, (int, float))
        and not isinstance(limit, bool)
        and isinstance(target, (int, float))
        and limit < target
    ):
        problems.append(
            f"{where}.max_ongoing_requests {limit} < target_ongoing_requests {target}: a replica could never reach "
            "the target, so the autoscaler would not scale up; set it 20-50% above the target"
        )
    return (initial if initial is not None else low), high


def replica_needs(dep: dict[str, Any], where: str, problems: list[str]) -> ReplicaNeeds:
    """Parse one deployment entry, appending schema problems to ``problems``."""
    options = dep.get("ray_actor_options") or {}
    if not isinstance(options, dict):
        problems.append(f"{where}.ray_actor_options must be a mapping")
        options = {}
    actor = _resources(options, f"{where}.ray_actor_options", problems)
    replicas, ceiling = _replica_counts(dep, where, problems)
    name = str(dep.get("name", "?"))
    raw = dep.get("placement_group_bundles")
    if raw is None:
        if dep.get("placement_group_strategy") is not None:
            problems.append(f"{where}.placement_group_strategy is set without placement_group_bundles")
        return ReplicaNeeds(name, replicas, ceiling, (actor,), None, "CPU" in actor)
    if not isinstance(raw, list) or not raw or not all(isinstance(b, dict) and b for b in raw):
        problems.append(
            f"{where}.placement_group_bundles must be a non-empty list of non-empty resource mappings"
        )
        return ReplicaNeeds(name, replicas, ceiling, (actor,), None, "CPU" in actor)
    bundles = tuple(
        {str(k): _num(v, f"{where}.placement_group_bundles[{i}].{k}", problems) for k, v in b.items()}
        for i, b in enumerate(raw)
    )
    strategy = dep.get("placement_group_strategy", "PACK")
    if strategy not in STRATEGIES:
        problems.append(
            f"{where}.placement_group_strategy {strategy!r} is not one of {', '.join(STRATEGIES)}"
        )
    short = {
        k: f"{v:g} > {bundles[0].get(k, 0.0):g}" for k, v in actor.items() if v > bundles[0].get(k, 0.0) + EPS
    }
    if short:
        problems.append(
            f"{where}: the replica actor must fit placement_group_bundles[0] (Serve places it there): {short}"
        )
    return ReplicaNeeds(name, replicas, ceiling, bundles, strategy, True)


def app_needs(app: dict[str, Any]) -> list[ReplicaNeeds]:
    """Every deployment's needs; ServeFitError listing all schema problems at once."""
    problems: list[str] = []
    deps = app.get("deployments")
    if not isinstance(deps, list) or not deps or not all(isinstance(d, dict) for d in deps):
        raise ServeFitError(f"Serve app {app.get('name')!r} has no 'deployments' list of mappings.")
    needs = [replica_needs(d, f"deployments[{d.get('name', i)}]", problems) for i, d in enumerate(deps)]
    if problems:
        raise ServeFitError(
            f"Serve app {app.get('name')!r} is not a valid config: " + "; ".join(problems) + "."
        )
    return needs


def _positive_int(value: Any, name: str, problems: list[str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"engine_args.{name} must be an integer >= 1, got {value!r}")
        return 1
    return value


def parallel_sizes(engine_args: dict[str, Any], problems: list[str]) -> tuple[int, int]:
    """(tensor_parallel_size, pipeline_parallel_size) from vLLM engine args, 1 when unset."""
    tp = _positive_int(engine_args.get("tensor_parallel_size", 1), "tensor_parallel_size", problems)
    pp = _positive_int(engine_args.get("pipeline_parallel_size", 1), "pipeline_parallel_size", problems)
    return tp, pp


def parallel_problems(tp: int, pp: int, needs: ReplicaNeeds) -> list[str]:
    """vLLM's parallel sizes against the replica's GPUs / NeuronCores."""
    problems: list[str] = []
    per = needs.per_replica()
    gpus, cores = per.get("GPU", 0.0), per.get("neuron_cores", 0.0)
    if cores > 0:
        if pp != 1:
            problems.append(f"vLLM-Neuron runs pipeline_parallel_size 1, got {pp}")
        if abs(cores - tp) > EPS:
            problems.append(
                f"tensor_parallel_size {tp} needs {tp} NeuronCores per replica, but {needs.deployment} asks for "
                f"neuron_cores {cores:g}; make them equal (seed: TP 8 = 8 cores = 4 Inferentia2 devices)"
            )
        return problems
    if gpus <= 0:
        return problems  # a CPU profile: vLLM-CPU places its own workers
    world = tp * pp
    if abs(gpus - world) > EPS:
        problems.append(
            f"tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {world} GPU worker(s), but each "
            f"{needs.deployment} replica asks for {gpus:g} GPU(s); give it exactly {world}"
        )
    if world > 1 and needs.strategy is None and pp > 1:
        problems.append(
            f"pipeline_parallel_size {pp} spans nodes: use placement_group_bundles (one GPU bundle per worker) "
            "with placement_group_strategy PACK"
        )
    gpu_bundles = [b.get("GPU", 0.0) for b in needs.bundles if b.get("GPU", 0.0) > 0]
    if needs.strategy is not None and world > 1 and any(abs(g - 1.0) > EPS for g in gpu_bundles):
        problems.append(
            f"each vLLM GPU worker takes one bundle of GPU 1; {needs.deployment} has GPU bundles {gpu_bundles}"
        )
    if needs.strategy == "STRICT_PACK" and pp > 1:
        problems.append(
            f"pipeline_parallel_size {pp} with STRICT_PACK puts every stage on one node: use PACK"
        )
    return problems


def _fits(node: dict[str, float], need: dict[str, float]) -> int:
    """How many copies of ``need`` fit on ``node`` (resources the node does not list count as 0)."""
    counts = [math.floor((node.get(r, 0.0) + EPS) / amount) for r, amount in need.items() if amount > 0]
    return min(counts) if counts else 10**9


def _checked(needs: dict[str, float], cluster: Cluster, cpus_known: bool) -> dict[str, float]:
    """The resources that can be checked.

    With a node list (Ray's own view) a resource the cluster does not list is 0: a GPU config on a
    CPU cluster is refused. Without one (a node-group view, e.g. EKS: only its accelerator, under its
    own name) only the resources it reports are checked. CPU only when the config says how many.
    """
    return {
        r: v
        for r, v in needs.items()
        if v > 0
        and (r in cluster.totals or (bool(cluster.nodes) and r != "CPU"))
        and (r != "CPU" or cpus_known)
    }


def demand(needs: Iterable[ReplicaNeeds], cluster: Cluster) -> dict[str, float]:
    """Total resources ``needs`` hold with their current replica counts."""
    total: dict[str, float] = {}
    for n in needs:
        for r, v in _checked(n.per_replica(), cluster, n.cpus_known).items():
            total[r] = total.get(r, 0.0) + n.replicas * v
    return total


def node_problems(n: ReplicaNeeds, tp: int, pp: int, cluster: Cluster) -> list[str]:
    """Per-node placement of one deployment's replicas (skipped when the cluster reports no nodes)."""
    if not cluster.nodes or n.replicas == 0:
        return []
    problems: list[str] = []
    per_node_gpus = [node.get("GPU", 0.0) for node in cluster.nodes]
    uses_gpus = n.per_replica().get("GPU", 0.0) > 0 and max(per_node_gpus) > 0  # no GPUs: the totals say so
    if uses_gpus and tp > 1 and tp > max(per_node_gpus) + EPS:
        problems.append(
            f"tensor_parallel_size {tp} must fit within one node (TP traffic stays on a node), but the largest "
            f"node has {max(per_node_gpus):g} GPU(s); lower TP to <= {max(per_node_gpus):g} and raise pipeline_parallel_size"
        )
    elif uses_gpus and pp > 1:
        stages = sum(math.floor((g + EPS) / tp) for g in per_node_gpus) if tp else 0
        if stages < pp * n.replicas:
            problems.append(
                f"pipeline_parallel_size {pp} x {n.replicas} replica(s) needs {pp * n.replicas} node slot(s) of "
                f"{tp} GPU(s) each, but the cluster's nodes ({', '.join(f'{g:g}' for g in per_node_gpus)} GPUs) "
                f"hold only {stages}"
            )
    if n.strategy in (None, "STRICT_PACK"):
        unit = {
            r: v for r, v in n.per_replica().items() if r in _checked(n.per_replica(), cluster, n.cpus_known)
        }
        slots = sum(_fits(node, unit) for node in cluster.nodes)
        if slots < n.replicas:
            where = "one node" if n.strategy else "a node"
            problems.append(
                f"{n.deployment}: {n.replicas} replica(s) of {_fmt(unit)} each must fit on {where}, but the "
                f"{len(cluster.nodes)} node(s) ({'; '.join(_fmt(_only(node, unit)) for node in cluster.nodes)}) "
                f"hold {slots}"
            )
    else:
        for i, bundle in enumerate(n.bundles):
            unit = _checked(bundle, cluster, True)
            if unit and not any(_fits(node, unit) for node in cluster.nodes):
                problems.append(f"{n.deployment}: placement_group_bundles[{i}] {_fmt(unit)} fits on no node")
        if n.strategy == "STRICT_SPREAD" and len(n.bundles) > len(cluster.nodes):
            problems.append(
                f"{n.deployment}: STRICT_SPREAD puts each of {len(n.bundles)} bundles on its own node; "
                f"the cluster has {len(cluster.nodes)}"
            )
    return problems


def _only(node: dict[str, float], unit: dict[str, float]) -> dict[str, float]:
    return {r: node.get(r, 0.0) for r in unit}


def _fmt(resources: dict[str, float]) -> str:
    return ", ".join(f"{v:g} {r}" for r, v in sorted(resources.items())) or "nothing"


def check_fit(
    app: dict[str, Any], cluster: Cluster, *, others: Iterable[dict[str, Any]] = (), vllm: bool = False
) -> FitReport:
    """Refuse (ServeFitError, every problem with its numbers) an app that cannot run on ``cluster``.

    ``others``: the other apps in the running Serve config (their replicas keep their resources).
    ``vllm``: the app's ``args.engine_args`` are vLLM's (parallel sizes are checked against resources).
    """
    name = app.get("name")
    needs = app_needs(app)
    problems: list[str] = []
    tp = pp = 1
    if vllm:
        tp, pp = parallel_sizes((app.get("args") or {}).get("engine_args") or {}, problems)
        for n in needs:
            problems += parallel_problems(tp, pp, n)
    held: dict[str, float] = {}
    for other in others:
        if other.get("name") != name:
            try:
                for r, v in demand(app_needs(other), cluster).items():
                    held[r] = held.get(r, 0.0) + v
            except ServeFitError:
                continue  # another app's config is Serve's business, not this deploy's
    report = FitReport()
    want = demand(needs, cluster)
    for resource, amount in sorted(want.items()):
        have = cluster.totals.get(resource, 0.0)
        free = have - held.get(resource, 0.0)
        parts = " + ".join(
            f"{n.replicas} x {n.per_replica().get(resource, 0.0):g} ({n.deployment})"
            for n in needs
            if n.per_replica().get(resource, 0.0) > 0
        )
        line = f"{resource}: needs {amount:g} = {parts}; cluster has {have:g}, other apps hold {held.get(resource, 0.0):g}"
        report.lines.append(line)
        if amount > free + EPS:
            hint = " (this cluster has none: pick a config for its hardware)" if have == 0 else ""
            problems.append(f"{line}, so {free:g} are free{hint}")
    for n in needs:
        problems += node_problems(n, tp, pp, cluster)
        ceiling = demand(
            [ReplicaNeeds(n.deployment, n.max_replicas, n.max_replicas, n.bundles, n.strategy, n.cpus_known)],
            cluster,
        )
        for resource, amount in ceiling.items():
            if (
                n.max_replicas > n.replicas
                and amount > cluster.totals.get(resource, 0.0) - held.get(resource, 0.0) + EPS
            ):
                report.warnings.append(
                    f"{n.deployment}: max_replicas {n.max_replicas} would need {amount:g} {resource}; the cluster has "
                    f"{cluster.totals.get(resource, 0.0):g} now (it must grow before Serve can scale that far)"
                )
    if problems:
        nodes = f"{len(cluster.nodes)} node(s)" if cluster.nodes else "node list unknown"
        raise ServeFitError(
            f"Serve app {name!r} cannot run on this cluster ({nodes}; {_fmt(cluster.totals)}): "
            + "; ".join(problems)
            + ". Nothing was deployed: pick a serve_config for this hardware, or change replicas/engine_args/workers."
        )
    return report
