"""Can this Serve app run on this cluster? Checked by the deploy step before anything is applied.

Serve accepts a config it cannot place and leaves the replicas PENDING until the deploy times out
(or, worse, half of an update stuck while the rest is serving). So before applying, raylift checks:

* the schema, with Ray's own code (Ray 2.60): the app by ``ServeApplicationSchema`` (and, with the other
  running apps, the whole config by ``ServeDeploySchema``: what ``PUT /api/serve/applications/`` runs), then
  what Serve checks only when it applies the config (refused here rather than DEPLOY_FAILED there): each
  ``autoscaling_config`` by ``AutoscalingConfig`` (the schema keeps a dict as a dict; ``num_replicas:
  auto`` starts from ``AutoscalingConfig.default()``, as Serve does) and ``ray_actor_options`` / placement
  group options by Serve's ``ReplicaConfig`` (resource quantities, strategy, non-empty bundles, the actor
  within bundle 0). A refusal names the field path from Ray's error and Ray's reason. Two rules stay
  raylift's: ``num_gpus`` above 1 must be whole (Ray's raylet refuses it only when it creates the actor)
  and ``max_ongoing_requests`` >= the autoscaling target (Ray accepts it; the app would never scale up).
  Ray ignores fields it does not define (forward compatibility); raylift warns about them (a typo);
* for vLLM, that the parallel sizes match the resources: tensor_parallel_size x
  pipeline_parallel_size GPU workers = the replica's GPUs; NeuronCores = tensor_parallel_size;
* the cluster: the replicas' accelerators (and CPUs, where the cluster reports them) within the
  totals left by the other apps, and, where the cluster reports its nodes, per node: a TP group
  within one node (TP <= GPUs per node), PP stages on enough nodes, STRICT_PACK on one node.
  No library does this half; it reads the parsed models, not the raw dicts.

Every fit refusal names the numbers (needed vs available) and what to change. Only conditions that are
certain to fail are refused; an autoscaling ceiling above the cluster's size is a warning (a cloud
cluster may grow).

Import cost: Ray's models are imported inside the functions that use them, never at module import, so
the DAG processor (which imports the operators) does not load Ray (a test checks). ``python -X importtime
-c "import ray.serve.schema"`` in the control env (Ray 2.60, pydantic 2.14, 2 shared cores, 12 runs):
0.69-0.85 s cumulative (0.9 s wall for the whole process; 1.3-1.6 s while the machine was busier), of which
``import ray`` is about 0.3 s and the ``ray.serve`` package (FastAPI's models, the request router) the
rest. Paid once per deploy task, in the worker, before anything is applied.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raylift.errors import ServeFitError

if TYPE_CHECKING:
    from pydantic import ValidationError
    from ray.serve.schema import DeploymentSchema, ServeApplicationSchema

ACCELERATORS = ("GPU", "neuron_cores")
EPS = 1e-9
FIX = (
    "Change the field(s) named above in the serve_config (or the replicas/autoscaling Params) as the message "
    "says; those marked (Ray's ...) are what Ray Serve itself would refuse. Nothing was deployed."
)


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


def _field_path(model: Any, loc: tuple[int | str, ...], data: Any) -> str:
    """Ray's pydantic error location as a config path, e.g. ``deployments[LLMServer].num_replicas``.

    Walks ``model``'s field types beside the raw ``data``: a list index is shown as the item's name
    where it has one; what pydantic appends after a union field (its member types, e.g.
    ``constrained-int``, ``str``) is not a field, so the path stops there.
    """
    from pydantic import BaseModel

    parts: list[str] = []
    kind: Any = model
    for key in loc:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if typing.get_origin(kind) in (typing.Union, types.UnionType) and len(args) == 1:
            kind = args[0]  # Optional[X]: pydantic adds no location step for it
        origin = typing.get_origin(kind)
        is_model = isinstance(kind, type) and issubclass(kind, BaseModel)
        if is_model and isinstance(key, str) and key in kind.model_fields:
            parts.append(key)
            kind = kind.model_fields[key].annotation
        elif origin is list and isinstance(key, int) and parts:
            item = data[key] if isinstance(data, list) and 0 <= key < len(data) else None
            name = item.get("name") if isinstance(item, dict) else None
            parts[-1] += f"[{name if name else key}]"
            kind, data = (typing.get_args(kind) or (Any,))[0], item
            continue
        elif (kind is dict or origin is dict) and isinstance(key, str):
            parts.append(key)
            kind = (typing.get_args(kind) or (Any, Any))[1]
        else:
            break
        data = data.get(key) if isinstance(data, dict) else None
    return ".".join(parts)


def _ray_problems(err: ValidationError, model: Any, data: Any, prefix: str = "") -> list[str]:
    """One line per field Ray's pydantic ``model`` refused: ``path: Ray's reason (got value) (Ray's model)``."""
    by_path: dict[str, list[str]] = {}
    got: dict[str, str] = {}
    for e in err.errors(include_url=False):
        path = _field_path(model, tuple(e["loc"]), data)
        reason = str(e["msg"]).removeprefix("Value error, ").rstrip(".!")
        if reason not in by_path.setdefault(path, []):
            by_path[path].append(reason)
        if not isinstance(e.get("input"), (dict, list)) and e["type"] != "value_error":
            got[path] = f" (got {e.get('input')!r})"
    return [
        f"{'.'.join(p for p in (prefix, path) if p) or '(the whole config)'}: {' or '.join(reasons)}{got.get(path, '')} "
        f"(Ray's {model.__name__})"
        for path, reasons in by_path.items()
    ]


def parse_app(app: dict[str, Any]) -> ServeApplicationSchema:
    """``app`` (one entry of a Serve config's ``applications``) as Ray's ``ServeApplicationSchema``."""
    from pydantic import ValidationError
    from ray.serve.schema import ServeApplicationSchema

    try:
        return ServeApplicationSchema.model_validate(app)
    except ValidationError as err:
        problems = _ray_problems(err, ServeApplicationSchema, app)
    raise ServeFitError(
        f"Serve app {app.get('name')!r} is not a valid config: "
        + "; ".join(problems) + ". " + FIX
    )


def check_deploy_config(app: dict[str, Any], others: Iterable[dict[str, Any]]) -> None:
    """The config Serve will get (``app`` beside the other running apps) by Ray's ``ServeDeploySchema``:
    the rules across apps (unique names and route prefixes, no per-app host/port)."""
    from pydantic import ValidationError
    from ray.serve.schema import ServeDeploySchema

    config = {"applications": [app, *others]}
    try:
        ServeDeploySchema.model_validate(config)
    except ValidationError as err:
        problems = _ray_problems(err, ServeDeploySchema, config)
        raise ServeFitError(
            f"Serve app {app.get('name')!r} cannot join the running Serve config: " + "; ".join(problems) + ". " + FIX
        ) from None


def _set(dep: DeploymentSchema, name: str) -> bool:
    """Whether the config sets deployment option ``name`` (unset options keep the code's values)."""
    from ray.serve._private.utils import DEFAULT

    return name in dep.model_fields_set and getattr(dep, name) is not DEFAULT.VALUE


def _autoscaling(dep: DeploymentSchema, where: str, problems: list[str]) -> Any:
    """The deployment's ``AutoscalingConfig`` as Serve builds it when applying the config, or None."""
    from pydantic import ValidationError
    from ray.serve.config import AutoscalingConfig

    given = dep.autoscaling_config if _set(dep, "autoscaling_config") else None
    if isinstance(given, AutoscalingConfig):
        return given
    if dep.num_replicas == "auto":  # Serve: AutoscalingConfig.default() updated with what the config gives
        values = {**AutoscalingConfig.default().model_dump(), **(given or {})}
    elif given is None:
        return None
    else:
        values = dict(given)
    try:
        return AutoscalingConfig(**values)
    except ValidationError as err:
        problems += _ray_problems(err, AutoscalingConfig, values, prefix=f"{where}.autoscaling_config")
        return None


def _replica_options(dep: DeploymentSchema, where: str, problems: list[str]) -> dict[str, Any]:
    """``ray_actor_options`` as the config sets them, after Serve's own ``ReplicaConfig`` checked them and
    the placement group options (what the controller runs when it applies the config; private to Serve,
    so pinned with Ray). Checked in two steps so that the refusal names the field."""
    from ray.serve._private.config import ReplicaConfig

    options = dep.ray_actor_options.model_dump(exclude_unset=True) if _set(dep, "ray_actor_options") else {}
    group = {
        name: getattr(dep, name)
        for name in (
            "placement_group_bundles", "placement_group_strategy", "placement_group_bundle_label_selector",
            "max_replicas_per_node",
        )
        if _set(dep, name)
    }
    steps: list[tuple[str, dict[str, Any]]] = [("ray_actor_options", {})]
    if group:
        steps.append(("/".join(group), group))
    for fields, kwargs in steps:
        try:
            ReplicaConfig.create(dep.name, ray_actor_options=dict(options), **kwargs)  # it fills in num_cpus
        except (ValueError, TypeError) as err:
            problems.append(f"{where}.{fields}: {str(err).rstrip('.')} (Ray Serve's ReplicaConfig)")
            break
    return options


def _unknown_fields(raw: dict[str, Any], where: str) -> list[str]:
    """Deployment fields (and ``ray_actor_options`` keys) Ray's schema does not define: Serve ignores them."""
    from ray.serve.schema import DeploymentSchema, RayActorOptionsSchema

    out = [f"{where}.{k}" for k in raw if k not in DeploymentSchema.model_fields]
    options = raw.get("ray_actor_options")
    if isinstance(options, dict):
        out += [f"{where}.ray_actor_options.{k}" for k in options if k not in RayActorOptionsSchema.model_fields]
    return out


def replica_needs(dep: DeploymentSchema, problems: list[str]) -> ReplicaNeeds:
    """One parsed deployment's needs; what Serve would refuse when applying it goes to ``problems``."""
    where = f"deployments[{dep.name}]"
    options = _replica_options(dep, where, problems)
    auto = _autoscaling(dep, where, problems)
    gpus = options.get("num_gpus") or 0.0
    if gpus > 1 and not float(gpus).is_integer():  # Ray's raylet refuses it when it creates the actor
        problems.append(
            f"{where}.ray_actor_options.num_gpus {gpus:g}: Ray shares a GPU only in fractions < 1; use a whole number"
        )
    asked = {"CPU": options.get("num_cpus"), "GPU": gpus, **(options.get("resources") or {})}
    actor = {str(k): float(v) for k, v in asked.items() if isinstance(v, (int, float)) and (v > 0 or k == "CPU")}
    if auto is not None:
        replicas = auto.initial_replicas if auto.initial_replicas is not None else auto.min_replicas
        ceiling = auto.max_replicas
        limit = dep.max_ongoing_requests if _set(dep, "max_ongoing_requests") else None
        target = auto.target_ongoing_requests
        if limit is not None and target is not None and limit < target:  # Ray accepts it
            problems.append(
                f"{where}.max_ongoing_requests {limit} < target_ongoing_requests {target:g}: a replica could never "
                "reach the target, so the autoscaler would not scale up; set it 20-50% above the target"
            )
    elif isinstance(dep.num_replicas, int):
        replicas = ceiling = dep.num_replicas
    else:
        replicas = ceiling = 1  # not in the config: the code's count, 1 by default
    if not _set(dep, "placement_group_bundles"):
        return ReplicaNeeds(dep.name, replicas, ceiling, (actor,), None, "CPU" in actor)
    bundles = tuple({str(k): float(v) for k, v in b.items()} for b in dep.placement_group_bundles)
    strategy = dep.placement_group_strategy if _set(dep, "placement_group_strategy") else "PACK"
    return ReplicaNeeds(dep.name, replicas, ceiling, bundles, strategy, True)


def app_needs(app: dict[str, Any], warnings: list[str] | None = None) -> list[ReplicaNeeds]:
    """Every deployment's needs, from Ray's parse of ``app``; ServeFitError listing every problem at once.

    ``warnings`` (when given) gets the fields Ray ignores.
    """
    parsed = parse_app(app)
    raws = [d for d in app.get("deployments") or [] if isinstance(d, dict)]
    if not parsed.deployments:
        raise ServeFitError(
            f"Serve app {app.get('name')!r} lists no deployments: raylift checks the fit from their options "
            "(replicas, ray_actor_options, placement_group_bundles); list them in the serve_config."
        )
    problems: list[str] = []
    needs = [replica_needs(dep, problems) for dep in parsed.deployments]
    if warnings is not None:
        for raw, dep in zip(raws, parsed.deployments):
            for path in _unknown_fields(raw, f"deployments[{dep.name}]"):
                warnings.append(f"{path} is not a field of Ray's Serve schema: Serve ignores it (a typo?)")
    if problems:
        raise ServeFitError(
            f"Serve app {app.get('name')!r} is not a valid config: " + "; ".join(problems) + ". " + FIX
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
    report = FitReport()
    needs = app_needs(app, report.warnings)
    problems: list[str] = []
    tp = pp = 1
    if vllm:
        tp, pp = parallel_sizes((app.get("args") or {}).get("engine_args") or {}, problems)
        for n in needs:
            problems += parallel_problems(tp, pp, n)
    held: dict[str, float] = {}
    running: list[dict[str, Any]] = []
    for other in others:
        if other.get("name") != name:
            try:
                for r, v in demand(app_needs(other), cluster).items():
                    held[r] = held.get(r, 0.0) + v
            except ServeFitError:
                continue  # another app's config is Serve's business, not this deploy's
            running.append(other)
    check_deploy_config(app, running)
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
