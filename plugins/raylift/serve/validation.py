"""Can this Serve app run on this cluster? Checked by the deploy step before anything is applied.

Serve accepts a config it cannot place and leaves the replicas PENDING until the deploy times out
(or, worse, half of an update stuck while the rest is serving). So before applying, raylift checks:

* the schema, with Ray's own code, by the Ray that will run the config: ``ray_schema_check.py`` beside this module
  (a stand-alone script: the app by ``ServeApplicationSchema``, Serve's ``AutoscalingConfig`` and ``ReplicaConfig``,
  the whole config by ``ServeDeploySchema``, a refusal naming the field path and Ray's reason), run by a target that
  can (``raylift.targets.base.ServeSchemaChecker``: the runtime env's Python on ``local``, a Ray job on the cluster's
  head on ``ray`` and ``ecs``) once per deploy (``raylift.release.start.fit_check``). This module only reads its
  verdict: the Airflow side has no Ray of its own (managed Airflow pins another Ray than a user's cluster runs, and
  each Ray version has its own rules);
* raylift's own rules, here, on the plain Serve-config dicts: ``num_gpus`` above 1 must be whole (Ray's raylet
  refuses it only when it creates the actor) and ``max_ongoing_requests`` >= the autoscaling target (Ray accepts
  it; the app would never scale up);
* for vLLM, that the parallel sizes match the resources: tensor_parallel_size x
  pipeline_parallel_size GPU workers = the replica's GPUs; NeuronCores = tensor_parallel_size;
* the cluster: the replicas' accelerators (and CPUs, where the cluster reports them) within the
  totals left by the other apps, and, where the cluster reports its nodes, per node: a TP group
  within one node (TP <= GPUs per node), PP stages on enough nodes, STRICT_PACK on one node.
  No library does this half; it reads the config's counts and resources as Serve reads them (replica counts
  from ``num_replicas`` or Serve's autoscaling defaults, ``ray_actor_options``, placement group bundles).

Every fit refusal names the numbers (needed vs available) and what to change. Only conditions that are
certain to fail are refused; an autoscaling ceiling above the cluster's size is a warning (a cloud
cluster may grow). Nothing here imports Ray (a test checks): the arithmetic is raylift's.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raylift.errors import ClusterError, ServeFitError

ACCELERATORS = ("GPU", "neuron_cores")
EPS = 1e-9
FIX = (
    "Change the field(s) named above in the serve_config (or the replicas/autoscaling Params) as the message "
    "says; those marked (Ray's ...) are what Ray Serve itself would refuse. Nothing was deployed."
)
# Serve's AutoscalingConfig, as Ray 2.60 defines it (ray/serve/config.py: the fields' defaults, and
# ``AutoscalingConfig.default()``, which ``num_replicas: auto`` starts from and the config's own autoscaling_config
# updates: ray/serve/_private/config.py ``handle_num_replicas_auto``, _private/application_state.py); the target is
# ray/serve/_private/constants.py DEFAULT_TARGET_ONGOING_REQUESTS
AUTOSCALING_FIELD_DEFAULTS: dict[str, Any] = {
    "min_replicas": 1, "initial_replicas": None, "max_replicas": 1, "target_ongoing_requests": 2.0,
}
AUTOSCALING_AUTO_DEFAULTS: dict[str, Any] = {"min_replicas": 1, "max_replicas": 100, "target_ongoing_requests": 2.0}
# Ray's Serve-schema check: a stand-alone script (stdlib + Ray) the target runs where the cluster's Ray is
SCHEMA_SCRIPT = Path(__file__).with_name("ray_schema_check.py")
SCHEMA_CHECK_TIMEOUT_S = 120.0


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


# -- Ray's judgement, read from the script's verdict ----------------------------------------------------------------
def schema_script_source() -> str:
    """The script's text, for a target that runs it as ``python -c`` on the cluster (a Ray job)."""
    return SCHEMA_SCRIPT.read_text(encoding="utf-8")


def schema_verdict(output: str) -> dict[str, Any] | None:
    """The script's verdict: the last JSON line of ``output`` that is one (a job's log has Ray's lines too)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                verdict = json.loads(line)
            except ValueError:
                continue
            if isinstance(verdict, dict) and "ok" in verdict:
                return verdict
    return None


def schema_warnings(verdict: Mapping[str, Any], judge: str) -> list[str]:
    """The fields Ray ignores (warnings) from the script's ``verdict``; ServeFitError with Ray's refusal, in the words
    the deploy step always used (the app's field paths, Ray's reasons). ``judge``: whose Ray it was, for the message."""
    if verdict.get("ok"):
        return [str(w) for w in verdict.get("warnings") or []]
    what = "is not a valid config" if verdict.get("stage") == "app" else "cannot join the running Serve config"
    raise ServeFitError(
        f"Serve app {verdict.get('app')!r} {what}: " + "; ".join(str(p) for p in verdict.get("problems") or [])
        + ". " + FIX + f" (Judged by Ray {verdict.get('ray', '?')} of {judge}.)"
    )


def run_schema_check(python: str | Path, config: dict[str, Any], app_name: str, *, env: dict[str, str] | None,
                     judge: str, timeout_s: float = SCHEMA_CHECK_TIMEOUT_S) -> list[str]:
    """Run the script with ``python`` (one with Ray: a runtime env's) on ``config`` for ``app_name``; the warnings,
    or ServeFitError with Ray's refusal, or ClusterError when it gave no verdict (no Ray there?)."""
    try:
        proc = subprocess.run([str(python), str(SCHEMA_SCRIPT), "-", app_name], input=json.dumps(config),
                              capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"Could not check the Serve config with the Ray of {judge} ({python}): {exc}. "
                           "Nothing was deployed.") from None
    verdict = schema_verdict(proc.stdout)
    if proc.returncode != 0 or verdict is None:
        raise ClusterError(
            f"Could not check the Serve config with the Ray of {judge} ({python} exited {proc.returncode}): "
            f"{proc.stderr[-500:] or proc.stdout[-500:]} Nothing was deployed."
        )
    return schema_warnings(verdict, judge)


# -- raylift's own arithmetic, on the plain config dicts ------------------------------------------------------------
def _number(value: Any, where: str, problems: list[str]) -> float | None:
    """``value`` as a resource quantity (None: not given); what is no number goes to ``problems``."""
    if value is None:
        return None
    if not isinstance(value, bool) and isinstance(value, (int, float, str)):
        try:
            return float(value)
        except ValueError:
            pass
    problems.append(f"{where}: not a number (got {value!r})")
    return None


def _count(value: Any, where: str, problems: list[str]) -> int | None:
    """``value`` as a replica count >= 0 (None: not given); anything else goes to ``problems``."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    problems.append(f"{where}: not a replica count (got {value!r})")
    return None


def _autoscaling(dep: Mapping[str, Any], where: str, problems: list[str]) -> dict[str, Any] | None:
    """The deployment's autoscaling values as Serve fills them in when it applies the config, or None (a fixed
    count): ``num_replicas: auto`` starts from ``AutoscalingConfig.default()``, updated with what the config gives."""
    given = dep.get("autoscaling_config")
    if given is not None and not isinstance(given, Mapping):
        problems.append(f"{where}.autoscaling_config: not a mapping (got {given!r})")
        given = None
    if dep.get("num_replicas") == "auto":
        return {**AUTOSCALING_FIELD_DEFAULTS, **AUTOSCALING_AUTO_DEFAULTS, **(given or {})}
    if given is None:
        return None
    return {**AUTOSCALING_FIELD_DEFAULTS, **given}


def replica_needs(dep: Mapping[str, Any], problems: list[str], index: int = 0) -> ReplicaNeeds:
    """One deployment's needs (a dict of the config's ``deployments``); raylift's own refusals go to ``problems``."""
    name = str(dep.get("name") or index)
    where = f"deployments[{name}]"
    raw_options = dep.get("ray_actor_options")
    options: Mapping[str, Any] = raw_options if isinstance(raw_options, Mapping) else {}
    gpus = _number(options.get("num_gpus"), f"{where}.ray_actor_options.num_gpus", problems) or 0.0
    if gpus > 1 and not float(gpus).is_integer():  # Ray's raylet refuses it when it creates the actor
        problems.append(
            f"{where}.ray_actor_options.num_gpus {gpus:g}: Ray shares a GPU only in fractions < 1; use a whole number"
        )
    custom = options.get("resources")
    asked: dict[str, Any] = {
        "CPU": _number(options.get("num_cpus"), f"{where}.ray_actor_options.num_cpus", problems), "GPU": gpus,
        **{str(k): _number(v, f"{where}.ray_actor_options.resources.{k}", problems)
           for k, v in (custom.items() if isinstance(custom, Mapping) else ())},
    }
    actor = {k: float(v) for k, v in asked.items() if v is not None and (v > 0 or k == "CPU")}
    auto = _autoscaling(dep, where, problems)
    if auto is not None:
        floor = _count(auto.get("min_replicas"), f"{where}.autoscaling_config.min_replicas", problems) or 0
        initial = _count(auto.get("initial_replicas"), f"{where}.autoscaling_config.initial_replicas", problems)
        replicas = initial if initial is not None else floor
        ceiling = _count(auto.get("max_replicas"), f"{where}.autoscaling_config.max_replicas", problems) or 0
        limit = _number(dep.get("max_ongoing_requests"), f"{where}.max_ongoing_requests", problems)
        target = _number(auto.get("target_ongoing_requests"), f"{where}.autoscaling_config.target_ongoing_requests",
                         problems)
        if limit is not None and target is not None and limit < target:  # Ray accepts it
            problems.append(
                f"{where}.max_ongoing_requests {limit:g} < target_ongoing_requests {target:g}: a replica could never "
                "reach the target, so the autoscaler would not scale up; set it 20-50% above the target"
            )
    else:
        count = _count(dep.get("num_replicas"), f"{where}.num_replicas", problems)
        replicas = ceiling = 1 if count is None else count  # not in the config: the code's count, 1 by default
    raw_bundles = dep.get("placement_group_bundles")
    if raw_bundles is None:
        return ReplicaNeeds(name, replicas, ceiling, (actor,), None, "CPU" in actor)
    bundles: list[dict[str, float]] = []
    for i, bundle in enumerate(raw_bundles if isinstance(raw_bundles, list) else [raw_bundles]):
        if not isinstance(bundle, Mapping):
            problems.append(f"{where}.placement_group_bundles[{i}]: not a mapping of resources (got {bundle!r})")
            continue
        amounts = {str(k): _number(v, f"{where}.placement_group_bundles[{i}].{k}", problems) for k, v in bundle.items()}
        bundles.append({k: v for k, v in amounts.items() if v is not None})
    strategy = str(dep.get("placement_group_strategy") or "PACK")
    return ReplicaNeeds(name, replicas, ceiling, tuple(bundles), strategy, True)


def app_needs(app: Mapping[str, Any]) -> list[ReplicaNeeds]:
    """Every deployment's needs, read from ``app`` (one entry of a Serve config's ``applications``); ServeFitError
    listing every problem at once."""
    deployments = [d for d in app.get("deployments") or [] if isinstance(d, Mapping)]
    if not deployments:
        raise ServeFitError(
            f"Serve app {app.get('name')!r} lists no deployments: raylift checks the fit from their options "
            "(replicas, ray_actor_options, placement_group_bundles); list them in the serve_config."
        )
    problems: list[str] = []
    needs = [replica_needs(dep, problems, i) for i, dep in enumerate(deployments)]
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

    raylift's arithmetic only, so it runs wherever a fit is weighed (each surge or canary shape, a rollback); Ray's
    own schema check runs once per deploy, where the cluster's Ray is (``raylift.release.start.fit_check``).
    ``others``: the other apps in the running Serve config (their replicas keep their resources).
    ``vllm``: the app's ``args.engine_args`` are vLLM's (parallel sizes are checked against resources).
    """
    name = app.get("name")
    report = FitReport()
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
