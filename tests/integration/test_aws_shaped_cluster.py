"""Ray's scheduler and Serve's controller judge the Serve configs raylift renders for each seed's AWS hosts.

For each seed profile a real Ray cluster is started on this machine whose nodes declare what Ray would find on the
seed's hosts (``tests.fixtures.aws_shaped_ray``: shapes read from the terraform variables, the RayService raylift
renders and moto's copy of EC2's instance data). The conf goes through the DAG's Params and the deploy task's own
steps before any apply, against the real target (ECS against moto with its head on this cluster's dashboard; EKS
against moto's node groups; ``ray`` against this cluster): ``render`` (the hardware profile ``auto`` picks from the
instances), the fit check, and ``direct_config`` (the whole config a direct release writes; for EKS, KubeRay's
``serveConfigV2`` from the rendered RayService). That config is applied to the cluster through Serve's REST API, as
raylift (ECS, ray) or KubeRay (EKS) applies it, with two changes: the apps' package is the stand-ins'
(``tests/fixtures/standin_apps``: same import paths, deployment names and reservations, no model), and the proxy
runs on the head only (every node here shares one IP, so only one proxy can bind the Serve port).

The verdict is Serve's and Ray's own: the RUNNING replicas Serve reports equal the ``replicas`` asked for, the
placement groups land as the profile claims (STRICT_PACK on one node; PP3 x TP4 four GPU bundles on each of three
nodes), and every conf the fit check refuses (naming the numbers) is one Serve leaves pending: its controller
reports replicas "taken more than 5s to be scheduled" while Ray holds their placement group PENDING. A conf the fit
check passes but Serve cannot place fails the test, as does one it refuses that Serve places.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from raylift.errors import ServeFitError
from raylift.serve.hardware import InstanceShape
from tests.aws.conftest import s3_proxy  # noqa: F401 - fixture
from tests.aws.moto_resources import ecs_cluster, eks_example_stack, tool_target_options
from tests.aws.standins import Proxy
from tests.aws.test_docs_confs import load_dag, render_deploy, shown
from tests.fixtures.aws_shaped_ray import (
    NodeShape,
    ShapedRayCluster,
    ecs_task_shape,
    kuberay_shapes,
    shaped_cluster,
    standin_working_dir,
)
from tests.targets.test_ecs import container_instances

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# 20500-20709 (5 nodes at most): below the kernel's ephemeral range (32768-60999) and above Ray's default worker
# ports (10002-19999); the stacks take 21xxx-29xxx by thousands, test_ray_cluster_target 20001-20499 and 20800
BASE_PORT = 20500
# Serve warns about replicas it cannot schedule after this long (its default is 30 s)
SCHEDULING_WARNING_S = 5
NOT_SCHEDULED = re.compile(r"has (\d+) replicas that have taken more than \d+s to be scheduled")
MODEL = {"model_id": "m", "revision": "r", "uri": "s3://bucket/models/m", "manifest_uri": "s3://bucket/m.json"}


# -- where the shapes come from --------------------------------------------------------------------
def tf_defaults(module: str) -> dict[str, Any]:
    """A terraform module's variable defaults (python-hcl2's parse of its variables.tf)."""
    import hcl2

    with (ROOT / f"terraform/modules/{module}/variables.tf").open() as f:
        doc = hcl2.load(f)
    out: dict[str, Any] = {}
    for block in doc.get("variable", []):
        for name, body in block.items():  # python-hcl2 keeps strings' quotes
            value = body.get("default")
            out[name.strip('"')] = value.strip('"') if isinstance(value, str) else value
    return out


def ec2_shapes(types: list[str]) -> dict[str, InstanceShape]:
    """EC2's DescribeInstanceTypes for ``types`` (moto's copy of AWS's data)."""
    info = boto3.client("ec2").describe_instance_types(InstanceTypes=sorted(set(types)))["InstanceTypes"]
    return {i["InstanceType"]: InstanceShape.from_ec2(i) for i in info}


def compose_cpus(service: str) -> int:
    """``--num-cpus`` of a Compose Ray service, at its default (``${RAY_HEAD_CPUS:-2}``)."""
    text = (ROOT / "docker-compose.yaml").read_text()
    block = text[text.index(f"\n  {service}:"):]
    found = re.search(r"--num-cpus=\$\{\w+:-(\d+)\}", block)
    assert found, f"docker-compose.yaml: {service} names no --num-cpus"
    return int(found.group(1))


# -- one conf, judged ------------------------------------------------------------------------------
@dataclass
class Verdict:
    conf: dict[str, Any]
    profile: str
    refusal: str | None
    config: dict[str, Any]


def prepare(conf: dict[str, Any], working_dir: str, current: dict[str, Any] | None = None) -> Verdict:
    """The deploy task's steps before any apply, on the DAG's validated Params: render (the profile), the fit check
    (``ServeFitError`` kept as the refusal), the whole config a direct release writes."""
    op = render_deploy(load_dag(), conf)
    op.artifact = {"digest": "standin", "working_dir": working_dir}  # the model code swapped, nothing else
    op.model = MODEL
    app = op.render()
    profile = op.hardware_profile()[0]
    current = op.target_impl.current_serve_config() if current is None else current
    try:
        op.check_fit_with_surge(app, current)
        refusal = None
    except ServeFitError as exc:
        refusal = str(exc)
    return Verdict(conf, profile, refusal, op.direct_config(app, current))


def one_host(config: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(config)
    out["proxy_location"] = "HeadOnly"
    return out


def judge(ray: ShapedRayCluster, verdict: Verdict, app: str = "llm") -> dict[str, Any]:
    """Apply the config and wait for Serve's own verdict: every replica RUNNING, or some it cannot schedule (the
    others RUNNING). Returns what Serve and Ray report."""
    ray.put(one_host(verdict.config))
    asked = int(verdict.conf["replicas"])

    def settled() -> bool:
        status = ray.applications().get(app) or {}
        if status.get("status") == "DEPLOY_FAILED":
            raise AssertionError(f"Serve could not deploy {verdict.profile}: {status}")
        if verdict.refusal is None:
            target = sum(int(d.get("target_num_replicas") or 0) for d in (status.get("deployments") or {}).values())
            if status.get("status") == "RUNNING" and target < asked:  # Serve is done: it wants fewer than asked
                raise AssertionError(f"Serve runs {verdict.profile} RUNNING with {target} replica(s), {asked} asked")
            return status.get("status") == "RUNNING" and ray.replica_states(app).get("RUNNING", 0) >= asked
        # Serve names a replica unscheduled only once it has waited past its threshold, one replica at a time: settle
        # when every replica asked for is either RUNNING or named unscheduled, not at the first such message
        late = [NOT_SCHEDULED.search(str(d.get("message"))) for d in (status.get("deployments") or {}).values()]
        named = sum(int(m.group(1)) for m in late if m)
        return named > 0 and ray.replica_states(app).get("RUNNING", 0) + named >= asked

    ray.wait_for(settled, f"Serve's verdict on {verdict.profile} x {asked}")

    def unplaced() -> list[dict[str, Any]]:
        return [a for a in ray.actors() if a["state"] == "PENDING_CREATION" and "ServeReplica" in a["class_name"]]

    def serve_pending() -> int:
        messages = [str(d.get("message") or "") for d in ray.applications()[app]["deployments"].values()]
        return sum(int(m.group(1)) for m in (NOT_SCHEDULED.search(x) for x in messages) if m)

    if verdict.refusal is not None:
        # Ray's state API lists actors from the GCS as the controller registers them, which can trail Serve's own
        # message by a moment (CI saw Serve name 2 unscheduled while the listing held 1): give Ray's view up to 30 s
        # to catch up before the snapshot; the assertion on it is unchanged
        deadline = time.monotonic() + 30
        while len(unplaced()) != serve_pending() and time.monotonic() < deadline:
            time.sleep(1.0)
    status = ray.applications()[app]
    messages = [str(d.get("message") or "") for d in status["deployments"].values()]
    pending = sum(int(m.group(1)) for m in (NOT_SCHEDULED.search(x) for x in messages) if m)
    groups = ray.placement_groups()
    return {"status": status["status"], "running": ray.replica_states(app).get("RUNNING", 0), "pending": pending,
            "ray_pending": len(unplaced()), "groups_pending": sum(g["state"] == "PENDING" for g in groups),
            "messages": messages, "groups": groups, "nodes": ray.node_names()}


def bundles_by_node(group: dict[str, Any], names: dict[str, str]) -> dict[str, list[dict[str, float]]]:
    out: dict[str, list[dict[str, float]]] = {}
    for bundle in group["bundles"]:
        out.setdefault(names.get(bundle.get("node_id") or "", "unplaced"), []).append(bundle["unit_resources"])
    return out


def _deployments(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for a in config["applications"] for d in a.get("deployments") or []]


def assert_verdicts_agree(verdict: Verdict, seen: dict[str, Any]) -> None:
    """The fit check and Serve agree: it passed and every replica asked for runs, or it refused (naming the numbers)
    and Serve leaves replicas unscheduled."""
    asked = int(verdict.conf["replicas"])
    table = f"{verdict.profile} x {asked}: Serve {seen['status']}, {seen['running']} RUNNING, {seen['pending']} pending"
    print(table, {name: bundles_by_node(g, seen["nodes"]) for name, g in
                  ((g["placement_group_id"][:8], g) for g in seen["groups"])})
    if verdict.refusal is None:
        assert seen["running"] == asked and seen["pending"] == 0, f"fit check passed, but {table}"
        assert all(g["state"] == "CREATED" for g in seen["groups"]), seen["groups"]
    else:
        assert re.search(r"needs \d+|must fit|hold \d+", verdict.refusal), verdict.refusal
        assert seen["pending"] > 0 and seen["running"] < asked, f"fit check refused ({verdict.refusal}), but {table}"
        # Ray's own state: as many replica actors waiting for resources, and, for placement-group replicas, as many
        # groups PENDING (a group is reserved whole or not at all)
        assert seen["ray_pending"] == seen["pending"], f"Ray holds {seen['ray_pending']} replica(s) unplaced: {table}"
        assert seen["groups_pending"] in (0, seen["pending"]), seen["groups"]
        assert bool(seen["groups_pending"]) == any("placement_group_bundles" in d for d in _deployments(verdict.config))


# -- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture()
def infra(s3_proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Proxy:  # noqa: F811
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("RAY_SERVE_SLOW_STARTUP_WARNING_S", str(SCHEDULING_WARNING_S))
    monkeypatch.setenv("RAY_SERVE_SLOW_STARTUP_WARNING_PERIOD_S", "1")
    return s3_proxy


@pytest.fixture()
def standins(tmp_path: Path) -> str:
    return standin_working_dir(tmp_path / "package")


def add_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, extra: dict[str, Any]) -> None:
    conn = {"conn_type": "raylift_cluster", "password": "token-from-the-stack", "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))  # as Airflow looks it up


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Any]:
    """Start one shaped cluster per test (``cluster(shapes)``), stopped at the test's end."""
    stack: list[Any] = []

    def start(shapes: list[NodeShape]) -> ShapedRayCluster:
        manager = shaped_cluster(shapes, root=tmp_path / "ray", base_port=BASE_PORT)
        stack.append(manager)
        return manager.__enter__()

    yield start
    for manager in stack:
        manager.__exit__(None, None, None)


# -- the seeds ---------------------------------------------------------------------------------------
def test_ecs_seed_on_three_g5_12xlarge_tasks(infra: Proxy, standins: str, cluster: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed S0 (ECS): the head and 2 workers on g5.12xlarge, 4 A10G each. The docs' conf (auto: llm-gpu.yaml), TP4
    x 3, PP3 x TP4 and the 0.5-GPU translator x 24 run as asked; TP4 x 4 and the translator x 26 are refused and
    stay pending."""
    tf = tf_defaults("ecs_ray")
    confs, connections = shown("ecs")
    docs_conf = confs[0]
    name = "raylift-ecs"
    types = [tf["head_instance_type"]] + [tf["worker_instance_type"]] * int(docs_conf["workers"])
    shapes = ec2_shapes(types)
    nodes = [ecs_task_shape("head" if i == 0 else f"worker-{i}", shapes[t], task_cpu=int(tf["task_cpu"]),
                            task_memory_mib=int(tf["task_memory_mib"]), gpus=int(tf["gpus_per_node"]))
             for i, t in enumerate(types)]  # fmt: skip
    boto3.client("s3").create_bucket(Bucket=f"{name}-models", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    ecs_cluster(name, {f"{name}-head": 1, f"{name}-worker": int(docs_conf["workers"])})
    head, *workers = container_instances(types, cluster=name)
    for service, on in ((f"{name}-head", [head]), (f"{name}-worker", workers)):
        for arn in on:
            boto3.client("ecs").start_task(cluster=name, taskDefinition="ray", containerInstances=[arn],
                                           group=f"service:{service}", startedBy="ecs-svc/1")  # fmt: skip
    tool_options, _ = tool_target_options({
        "raylift_target": "ecs", "region": "us-west-2", "model_bucket": f"{name}-models",
        "model_store_uri": f"s3://{name}-models/models", "ecr_repository_url": f"123.dkr.ecr.us-west-2.amazonaws.com/{name}-ray-vllm",
        "codebuild_project": f"{name}-ray-vllm", "ecs_cluster": name,
        "ecs_head_service": f"{name}-head", "ecs_worker_service": f"{name}-worker",
        "cloudmap_namespace": f"{name}.local", "cloudmap_service": "head",
    })  # fmt: skip
    ray = cluster(nodes)
    # the Ray head is this cluster's: the address Cloud Map would give, its dashboard and Serve ports
    here = {"head_address": "127.0.0.1", "dashboard_port": BASE_PORT + 1, "serve_port": ray.serve_port,
            "serve_host": "127.0.0.1"}
    (conn_id, extra), = connections.items()
    add_connection(monkeypatch, conn_id, {**tool_options, **extra, **here})

    first = prepare(docs_conf, standins)
    assert first.profile == "llm-gpu.yaml"  # auto on g5.12xlarge
    assert_verdicts_agree(first, judge(ray, first))
    ray.clear()

    tp4 = prepare(docs_conf | {"serve_config": "llm-gpu-tp4.yaml", "replicas": 3}, standins)
    seen = judge(ray, tp4)
    assert_verdicts_agree(tp4, seen)
    placed = [bundles_by_node(g, seen["nodes"]) for g in seen["groups"]]
    assert all(len(p) == 1 and sum(b.get("GPU", 0) for b in next(iter(p.values()))) == 4 for p in placed), placed
    assert len({next(iter(p)) for p in placed}) == 3, f"three TP4 replicas on three nodes: {placed}"
    more = prepare(docs_conf | {"serve_config": "llm-gpu-tp4.yaml", "replicas": 4}, standins)
    assert more.refusal and "GPU: needs 16" in more.refusal and "cluster has 12" in more.refusal, more.refusal
    assert_verdicts_agree(more, judge(ray, more))
    ray.clear()

    pp = prepare(docs_conf | {"serve_config": "llm-gpu-pp3-tp4.yaml", "replicas": 1}, standins)
    seen = judge(ray, pp)
    assert_verdicts_agree(pp, seen)
    (group,) = seen["groups"]
    gpus = {node: sum(b.get("GPU", 0) for b in bundles) for node, bundles in bundles_by_node(group, seen["nodes"]).items()}
    assert sorted(gpus.values()) == [4, 4, 4], f"PP3 x TP4: one TP group of 4 GPUs on each node: {gpus}"
    ray.clear()

    half = prepare(docs_conf | {"serve_config": "translator-gpu.yaml", "replicas": 24}, standins)
    assert_verdicts_agree(half, judge(ray, half, app="llm"))
    over = prepare(docs_conf | {"serve_config": "translator-gpu.yaml", "replicas": 26}, standins)
    assert over.refusal and "GPU: needs 13" in over.refusal, over.refusal
    assert_verdicts_agree(over, judge(ray, over, app="llm"))


def eks_setup(monkeypatch: pytest.MonkeyPatch, *, group: str, profile: str, desired: int,
              ) -> tuple[dict[str, Any], str, dict[str, list[str]]]:
    """moto's EKS cluster and node groups as the terraform example declares them, ``group`` at ``desired`` nodes,
    and the docs' raylift_cluster connection for it. Returns (the docs' conf, its connection id, the groups)."""
    from tests.aws.test_docs_confs import eks_node_groups

    confs, connections = shown("eks")
    groups = eks_node_groups()
    name = "raylift-eks"
    tool_options = eks_example_stack(name, groups, max_size=10, desired={group: desired})
    (conn_id, extra), = connections.items()
    add_connection(monkeypatch, conn_id, {**tool_options, **extra, "worker_nodegroup": f"{name}-{group}",
                                          "profile": profile, "image": "123.dkr.ecr.us-west-2.amazonaws.com/ray:t"})
    return confs[0], conn_id, groups


def kuberay_cluster(conf: dict[str, Any], standins: str, groups: dict[str, list[str]], node_group: str,
                    cluster: Any) -> tuple[ShapedRayCluster, Any]:
    """The Ray cluster KubeRay would start for the RayService raylift renders for ``conf``: its pods as Ray nodes."""
    op = render_deploy(load_dag(), conf)
    op.artifact, op.model = {"digest": "standin", "working_dir": standins}, MODEL
    app = op.render()
    manifest = op.target_impl.render(op.direct_config(app, {"applications": []}), int(conf["workers"]))
    instance = ec2_shapes(groups[node_group])[groups[node_group][0]]
    shapes = kuberay_shapes(manifest, {g["groupName"]: instance for g in
                                       manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]})
    return cluster(shapes), op.target_impl


def kuberay_verdict(conf: dict[str, Any], standins: str, target: Any, ray: ShapedRayCluster) -> Verdict:
    """As ``prepare`` (a first deploy: no RayService yet), the config being KubeRay's serveConfigV2 of the render
    (KubeRay adds the HTTP host and port it owns: here this cluster's)."""
    verdict = prepare(conf, standins, current={"applications": []})
    manifest = target.render(verdict.config, int(conf["workers"]))
    verdict.config = {**yaml.safe_load(manifest["spec"]["serveConfigV2"]),
                      "http_options": {"host": "127.0.0.1", "port": ray.serve_port}}
    return verdict


def test_eks_gpu_node_group_one_gpu_pods(infra: Proxy, standins: str, cluster: Any,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed S2 (EKS, gpu-vllm on the g5.12xlarge node group): four one-GPU pods on one node. The docs' conf (auto:
    llm-gpu.yaml, 1 replica) runs; TP4 is refused (no pod has 4 GPUs) and Serve cannot place it."""
    docs_conf, _, groups = eks_setup(monkeypatch, group="gpu", profile="gpu-vllm", desired=1)
    conf = docs_conf | {"workers": 4}
    ray, target = kuberay_cluster(conf, standins, groups, "gpu", cluster)
    assert len(ray.alive_nodes()) == 5  # the head pod and four worker pods
    first = kuberay_verdict(docs_conf, standins, target, ray)
    assert first.profile == "llm-gpu.yaml"
    assert_verdicts_agree(first, judge(ray, first))
    ray.clear()
    tp4 = kuberay_verdict(conf | {"serve_config": "llm-gpu-tp4.yaml", "replicas": 1}, standins, target, ray)
    assert tp4.refusal and "largest node has 1 GPU" in tp4.refusal, tp4.refusal
    assert_verdicts_agree(tp4, judge(ray, tp4))


def test_eks_inf2_tp8_three_pods_a_node(infra: Proxy, standins: str, cluster: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed S4 (EKS, inf2 on inf2.48xlarge): three TP8 pods (8 NeuronCores each) on one node; auto picks
    llm-neuron.yaml; three replicas run, one a pod; a fourth is refused and stays pending."""
    docs_conf, _, groups = eks_setup(monkeypatch, group="inferentia", profile="inf2", desired=1)
    conf = docs_conf | {"workers": 3, "replicas": 3}
    ray, target = kuberay_cluster(conf, standins, groups, "inferentia", cluster)
    three = kuberay_verdict(conf, standins, target, ray)
    assert three.profile == "llm-neuron.yaml"
    seen = judge(ray, three)
    assert_verdicts_agree(three, seen)
    replicas = [a for a in ray.actors() if "LLMServer" in (a.get("class_name") or "") or "LLMServer" in (a.get("name") or "")]
    assert len({a["node_id"] for a in replicas}) == 3, f"one TP8 replica a pod: {[a['node_id'] for a in replicas]}"
    four = kuberay_verdict(conf | {"replicas": 4}, standins, target, ray)
    assert four.refusal and "neuron_cores: needs 32" in four.refusal, four.refusal
    assert_verdicts_agree(four, judge(ray, four))


def test_eks_graviton_llamacpp(infra: Proxy, standins: str, cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed S1 (EKS, llama.cpp on Graviton c7g/c8g.8xlarge): one 30-CPU pod a node; auto picks
    llamacpp-graviton.yaml; two replicas run on two pods, a third is refused and stays pending."""
    docs_conf, _, groups = eks_setup(monkeypatch, group="graviton", profile="graviton", desired=2)
    conf = docs_conf | {"workers": 2, "replicas": 2}
    ray, target = kuberay_cluster(conf, standins, groups, "graviton", cluster)
    two = kuberay_verdict(conf, standins, target, ray)
    assert two.profile == "llamacpp-graviton.yaml"
    assert_verdicts_agree(two, judge(ray, two))
    three = kuberay_verdict(conf | {"replicas": 3}, standins, target, ray)
    assert three.refusal and "CPU: needs 90" in three.refusal, three.refusal
    assert_verdicts_agree(three, judge(ray, three))


def test_cpu_on_the_compose_shaped_cluster(infra: Proxy, standins: str, cluster: Any) -> None:
    """CPU (the ``ray`` target, as the Compose quick start runs it): the head (2 CPUs) and one worker (1 CPU), as
    docker-compose.yaml starts them. llm-cpu.yaml x 1 runs; x 4 (4 CPUs on 3) is refused and stays pending."""
    nodes = [NodeShape("head", compose_cpus("ray-head")), NodeShape("worker-0", compose_cpus("ray-worker"))]
    ray = cluster(nodes)
    conf = {"target": "ray", "model_source": "/m", "model_id": "raylift/tiny-llama", "served_name": "tiny-llama",
            "replicas": 1, "workers": 1,
            "target_options": {"dashboard_url": ray.dashboard_url, "serve_url": f"http://127.0.0.1:{ray.serve_port}"}}
    one = prepare(conf, standins)
    assert one.profile == "llm-cpu.yaml"
    assert_verdicts_agree(one, judge(ray, one))
    four = prepare(conf | {"replicas": 4}, standins)
    assert four.refusal and "CPU: needs 4" in four.refusal, four.refusal
    assert_verdicts_agree(four, judge(ray, four))
