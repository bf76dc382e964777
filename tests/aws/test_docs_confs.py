"""Every raylift_deploy conf the AWS quick starts (docs/infrastructure.md) show is run: read out of the markdown
itself, validated against the DAG's Params, the deploy task's templates rendered as Airflow renders them, and the
hardware profile resolved and fit-checked against moto resources sized like the terraform example it goes with
(instance types read from the example's module defaults; what each has from moto's copy of EC2's instance-type
data). It stops before anything is applied: no Ray, no vLLM. The quick start must name every step a user takes,
including the ``raylift_cluster`` connection the conf names."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest

from raylift.operators.deploy import ServeDeployOperator
from raylift.serve.validation import Cluster, check_fit
from tests.aws.moto_resources import ecs_cluster, eks_example_stack, tool_target_options
from tests.aws.standins import Proxy
from tests.targets.test_ecs import container_instances

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "infrastructure.md"
SECTIONS = {"ecs": "## Run on AWS ECS", "eks": "## Run on EKS"}
TRIGGER = re.compile(r'airflow dags trigger raylift_deploy --conf "\$\(cat <<JSON\n(.*?)\nJSON\n\)"', re.S)
CONNECTION = re.compile(r"airflow connections add (\S+) --conn-type raylift_cluster(.*?)(?:\n\n|\n```)", re.S)
JQ_MERGE = re.compile(r"jq -c '\. \+ (\{.*?\})'")


def section(target: str) -> str:
    text = DOC.read_text()
    start = text.index(SECTIONS[target])
    end = text.find("\n## ", start + 1)
    return text[start:end]


def module_default(path: str, variable: str) -> str:
    """A string variable's default in a terraform module (what the example uses when it does not set it)."""
    text = (ROOT / path).read_text()
    block = text[text.index(f'variable "{variable}"'):]
    found = re.search(r'default\s*=\s*"([^"]+)"', block)
    assert found, f"{path}: {variable} has no default"
    return found.group(1)


def eks_node_groups() -> dict[str, list[str]]:
    """The EKS example's node groups and their instance types (modules/eks_ray's ``node_groups`` default)."""
    text = (ROOT / "terraform/modules/eks_ray/variables.tf").read_text()
    block = text[text.index('variable "node_groups"'):]
    return {name: re.findall(r'"([^"]+)"', types)
            for name, types in re.findall(r"\n    (\w+) = \{\n\s+instance_types = \[([^\]]*)\]", block)}  # fmt: skip


def shown(target: str) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The confs the section triggers (``$(airflow variables get raylift_target_options)`` left as a marker) and the
    raylift_cluster connections it adds: id -> the JSON its ``jq`` merges over the tool's target options."""
    text = section(target)
    confs = [json.loads(body.replace("$(airflow variables get raylift_target_options)", '"TOOL_OPTIONS"'))
             for body in TRIGGER.findall(text)]  # fmt: skip
    connections: dict[str, dict[str, Any]] = {}
    for conn_id, rest in CONNECTION.findall(text):
        merged = JQ_MERGE.search(rest)
        # -j: the tool stores the options with `variables set --json`, and a plain `variables get` prints them as one
        # JSON string, which jq refuses to merge into (the connection would be added with no options)
        assert merged and "airflow variables get -j raylift_target_options" in rest, rest
        connections[conn_id] = json.loads(merged.group(1))
    return confs, connections


def load_dag() -> Any:
    sys.path.insert(0, str(ROOT / "dags"))
    try:
        import raylift_deploy
    finally:
        sys.path.remove(str(ROOT / "dags"))
    return raylift_deploy.dag


def render_deploy(dag: Any, conf: dict[str, Any]) -> ServeDeployOperator:
    """The deploy task with the run's Params as Airflow gives them (validated, defaults filled) and its templated
    fields rendered by the DAG's own template environment (native objects)."""
    import copy

    from airflow.sdk.definitions.xcom_arg import XComArg

    params = copy.deepcopy(dag.params)
    params.update(conf)  # as a DagRun's conf is merged over the DAG's Params
    context = {"params": params.validate()}
    task = dag.get_task("deploy")
    env = dag.get_template_env()
    # the upstream steps' XComs (artifact, model, the chosen profile, the lease) are not the Params': given below, or
    # None as when those steps left nothing
    values = {f: task.render_template(getattr(task, f), context, env) for f in task.template_fields
              if not isinstance(getattr(task, f), XComArg)}  # fmt: skip
    return ServeDeployOperator(
        task_id="deploy", artifact={"digest": "d", "working_dir": "s3://bucket/artifacts/d.zip"},
        model={"model_id": "m", "revision": "r", "uri": "s3://bucket/models/m", "manifest_uri": "s3://bucket/m.json"},
        **{k: v for k, v in values.items() if k != "holds_release_lease"},
    )  # fmt: skip


def add_connections(monkeypatch: pytest.MonkeyPatch, connections: dict[str, dict[str, Any]],
                    tool_options: dict[str, Any]) -> None:
    for conn_id, extra in connections.items():
        conn = {"conn_type": "raylift_cluster", "password": "token-from-the-stack", "extra": {**tool_options, **extra}}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


@pytest.fixture()
def infra(s3_proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Proxy:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    return s3_proxy


def deploy_and_check(conf: dict[str, Any], tool_options: dict[str, Any], nodes: list[dict[str, float]]) -> None:
    """Params, render, hardware profile and fit (the deploy's steps before any apply), as the deploy task runs them."""
    dag = load_dag()
    conf = {k: (tool_options if v == "TOOL_OPTIONS" else v) for k, v in conf.items()}
    op = render_deploy(dag, conf)
    app = op.render()
    deployment = app["deployments"][0]
    env = (app.get("runtime_env") or {}).get("env_vars") or {}
    assert not [k for k in env if k.startswith("VLLM_CPU_")], f"the docs' conf deploys a CPU profile: {env}"
    assert (deployment.get("ray_actor_options") or {}).get("num_gpus", 0) >= 1, (
        f"the docs' conf gives its replica no GPU on a GPU cluster: {deployment.get('ray_actor_options')}")
    totals: dict[str, float] = {}
    for node in nodes:
        for key, value in node.items():
            totals[key] = totals.get(key, 0.0) + value
    check_fit(app, Cluster(totals=totals, nodes=tuple(nodes)), others=[], vllm=True)


def test_the_ecs_quick_start_conf_deploys_the_gpu_profile(infra: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    confs, connections = shown("ecs")
    assert len(confs) == 1, "the ECS quick start shows one raylift_deploy conf"
    conf = confs[0]
    assert conf.get("cluster_conn_id") in connections, (
        "the ECS quick start's conf must name the raylift_cluster connection the section adds (the Ray token's)")
    assert "ray_auth_token_secret_arn" in section("ecs")  # where the connection's password comes from
    head_type = module_default("terraform/modules/ecs_ray/variables.tf", "head_instance_type")
    worker_type = module_default("terraform/modules/ecs_ray/variables.tf", "worker_instance_type")
    name = "raylift-ecs"  # terraform/examples/ecs: var.name's default
    boto3.client("s3").create_bucket(Bucket=f"{name}-models", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    ecs_cluster(name, {f"{name}-head": 1, f"{name}-worker": conf["workers"]})
    head, *workers = container_instances([head_type] + [worker_type] * conf["workers"], cluster=name)
    for service, on in ((f"{name}-head", [head]), (f"{name}-worker", workers)):
        for arn in on:
            boto3.client("ecs").start_task(cluster=name, taskDefinition="ray", containerInstances=[arn],
                                           group=f"service:{service}", startedBy="ecs-svc/1")  # fmt: skip
    tool_options, _ = tool_target_options({
        "raylift_target": "ecs", "region": "us-west-2", "model_bucket": f"{name}-models",
        "model_store_uri": f"s3://{name}-models/models", "ecr_repository_url": f"123.dkr.ecr.us-west-2.amazonaws.com/{name}-ray-vllm",
        "image_tag": "latest", "codebuild_project": f"{name}-ray-vllm", "ecs_cluster": name,
        "ecs_head_service": f"{name}-head", "ecs_worker_service": f"{name}-worker",
        "cloudmap_namespace": f"{name}.local", "cloudmap_service": "head",
    })  # fmt: skip
    add_connections(monkeypatch, connections, tool_options)
    from raylift.hooks.ec2_instance_types import Ec2InstanceTypesHook

    gpus = float(Ec2InstanceTypesHook(aws_conn_id="aws_default").shapes([worker_type])[0].gpus)
    deploy_and_check(conf, {}, [{"CPU": 48.0, "GPU": gpus}] * (1 + conf["workers"]))


def test_the_eks_quick_start_conf_deploys_the_gpu_profile(infra: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    confs, connections = shown("eks")
    assert len(confs) == 1, "the EKS quick start shows one raylift_deploy conf"
    conf = confs[0]
    assert conf.get("cluster_conn_id") in connections, (
        "the EKS quick start's conf must name the raylift_cluster connection the section adds")
    assert connections[conf["cluster_conn_id"]].get("ray_auth_secret"), "the Ray token's Secret is a step too"
    groups = eks_node_groups()
    assert set(groups) >= {"gpu", "graviton", "inferentia", "system"}, groups
    name = "raylift-eks"
    tool_options = eks_example_stack(name, groups, max_size=4)
    assert tool_options["worker_nodegroup"] == f"{name}-gpu"
    add_connections(monkeypatch, connections, tool_options)
    from raylift.hooks.ec2_instance_types import Ec2InstanceTypesHook

    gpus = float(Ec2InstanceTypesHook(aws_conn_id="aws_default").shapes(groups["gpu"])[0].gpus)
    deploy_and_check(conf, {}, [{"CPU": 48.0, "GPU": gpus}] * max(1, conf["workers"]))


# What a user types, in the order the section's shell blocks show it (a user copies the blocks top to bottom).
STEPS = {
    "ecs": ["docker build -f images/airflow/Dockerfile", "docker push", "aws secretsmanager create-secret",
            "staging_image = ", "terraform apply", "tools/tf_outputs_to_airflow.py", "--replace", "| sh",
            "airflow connections add", "--conn-type raylift_cluster", "airflow dags unpause raylift_deploy",
            "airflow dags trigger raylift_deploy", "airflow dags list-runs raylift_deploy"],
    "eks": ["staging_image = ", "terraform apply", "create secret generic", "create-access-entry",
            "tools/tf_outputs_to_airflow.py", "--replace", "| sh", "airflow connections add",
            "--conn-type raylift_cluster", "airflow dags unpause raylift_deploy", "airflow dags trigger raylift_deploy",
            "airflow dags list-runs raylift_deploy"],
}


def shell(target: str) -> str:
    return "".join(re.findall(r"```bash\n(.*?)```", section(target), re.S))


@pytest.mark.parametrize("target", sorted(SECTIONS))
def test_the_quick_start_names_every_step(target: str) -> None:
    """Read top to bottom: the staging image and the hub token, the stack, Airflow pointed at it, the cluster's
    connection, the unpause (Airflow creates DAGs paused: a paused DAG's run never starts), the trigger, the wait.
    tests/entrypoints/test_quickstarts.py runs these blocks on a scheduler-driven Airflow."""
    text = shell(target)
    steps = STEPS[target]
    where = [text.find(step) for step in steps]
    assert -1 not in where, f"the {target} quick start lacks {steps[where.index(-1)]!r}"
    assert where == sorted(where), f"the {target} quick start's steps are out of order: {dict(zip(steps, where))}"
    for conn_id in shown(target)[1]:
        assert shlex.quote(conn_id) == conn_id
    # the staging image is a variable of the example the section applies
    assert 'variable "staging_image"' in (ROOT / f"terraform/examples/{target}/variables.tf").read_text()


def test_the_hub_token_reaches_the_staging_step() -> None:
    """The quick starts stage a gated model: ECS's staging task reads HF_TOKEN from the secret given to the
    ecs_ray module's staging_hf_token_secret_arn; EKS's Jobs from the Secret the connection's hf_token_secret
    names, under raylift's key."""
    from raylift.kuberay.manifest import HF_TOKEN_SECRET_KEY

    assert 'variable "staging_hf_token_secret_arn"' in (ROOT / "terraform/modules/ecs_ray/staging.tf").read_text()
    assert "staging_hf_token_secret_arn" in section("ecs")
    secret = re.search(r"kubectl -n (\S+) create secret generic (\S+) --from-literal=(\w+)=", shell("eks"))
    assert secret, "the EKS quick start creates no Secret for the hub token"
    namespace, name, key = secret.groups()
    # the key raylift reads, in the namespace the stack runs the staging Jobs in (the Ray namespace)
    assert key == HF_TOKEN_SECRET_KEY, key
    assert namespace == module_default("terraform/modules/eks_ray/variables.tf", "ray_namespace"), namespace
    connections = shown("eks")[1]
    assert [extra.get("hf_token_secret") for extra in connections.values()] == [name], connections
