"""The docs' AWS quick starts (docs/infrastructure.md, "Run on AWS ECS" / "Run on EKS") as a new user runs them, on an
Airflow whose scheduler decides what runs (``tests/entrypoints/quickstart_stack.py``; the module docstring of
``test_quickstarts.py`` says how the docs' blocks are run). They start no engine, so they run in lane 2
(tools/test.sh), on an Airflow of their own, beside the engine lane's local and Compose quick starts.

Every block of the quick start runs (EKS: after the ECS section's staging-image block, as it says), against a moto
server for AWS (the ``aws`` CLI and raylift's boto3 through ``AWS_ENDPOINT_URL``; where this machine has no AWS CLI, a
boto3 stand-in for the calls the docs make), with stand-ins for what cannot run here: ``terraform`` (``apply`` records
the ``terraform.tfvars`` the block wrote; the example's resources are made in moto, as the example names them, before
the blocks run; ``output`` prints the stack's outputs, ``staging_image``'s as the tfvars set it), ``docker``
(``push`` puts the image's manifest into moto's ECR) and ``kubectl`` (commands recorded, a Secret's name kept).
The run goes through the scheduler until the first step that needs what moto does not do:
``check_hardware_profile`` resolves the profile through the connection the docs add (EKS: ``llm-gpu.yaml`` from
the gpu node group's instance type; ECS: the idle stack runs no task yet, so none), then ``build_artifact``
starts the image build in CodeBuild, which moto marks succeeded without running the buildspec. On ECS raylift
then re-points the tag the tasks run at the built image, which was never pushed, and refuses: the run ends
``failed`` at ``build_artifact``. On EKS the pods run the content tag itself, and ``stage_model`` (remote: the
docs' staging image) creates its Job at the cluster's Kubernetes API, whose address (moto's ``DescribeCluster``)
resolves nowhere: the run ends ``failed`` at ``stage_model``. Those are its terminal states here, not the docs'
(``success``): staging the 8B model, scaling and serving on GPUs are not run (``tests/integration/
test_aws_pipeline.py`` runs those steps for a CPU profile against moto, a Kubernetes API stand-in and a local Ray).
What the docs' steps left is checked where it lands: the connection's options (kind, Ray token or its Secret,
the staging task definition or image, the hub token's Secret), the staging image in ECR, the token's secret.
The EKS access entry for an existing role is not run (moto has no access entries): its group is checked against
the one terraform's RBAC binds.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from tests.aws.moto_resources import tf_outputs
from tests.aws.test_docs_confs import eks_node_groups
from tests.entrypoints.quickstart_stack import (
    ACCOUNT,
    DAG,
    HF_TOKEN,
    INFRA,
    REGION,
    ROOT,
    QuickStart,
    bash_blocks,
    quick_stack,
    section,
    split_at_trigger,
)
from tests.harness.moto_server import aws_env, reset

pytestmark = pytest.mark.integration

PORT_BASE = 28000  # this module's ports: Airflow 28080 (no Ray cluster starts here)
AWS_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def quick(moto_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[QuickStart]:
    with quick_stack(moto_url, tmp_path_factory, port_base=PORT_BASE) as stack:
        yield stack


# -- AWS: the stacks as terraform would leave them, in moto ---------------------------------------------------------
def make_ecs_stack(name: str = "raylift-ecs") -> dict[str, Any]:
    """terraform/examples/ecs's resources raylift calls, named as its modules name them, and the stand-in state."""
    bucket = f"{name}-models-{ACCOUNT}"  # model_bucket_name null: "<name>-models-<account id>"
    boto3.client("s3").create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    repo = boto3.client("ecr").create_repository(repositoryName=f"{name}-ray-vllm")["repository"]["repositoryUri"]
    codebuild_projects(f"{name}-ray-vllm")
    ecs = boto3.client("ecs")
    ecs.create_cluster(clusterName=name)
    for role in ("head", "worker"):
        ecs.register_task_definition(family=f"{name}-{role}", containerDefinitions=[
            {"name": "ray", "image": f"{repo}:latest", "memory": 512}])
        ecs.create_service(cluster=name, serviceName=f"{name}-{role}", taskDefinition=f"{name}-{role}", desiredCount=0)
    sd = boto3.client("servicediscovery")
    op = sd.create_private_dns_namespace(Name=f"{name}.local", Vpc="vpc-0raylift")["OperationId"]
    namespace = sd.get_operation(OperationId=op)["Operation"]["Targets"]["NAMESPACE"]
    sd.create_service(Name="head", NamespaceId=namespace,
                      DnsConfig={"RoutingPolicy": "MULTIVALUE", "DnsRecords": [{"Type": "A", "TTL": 10}]})
    token = boto3.client("secretsmanager").create_secret(Name=f"{name}-ray-auth-token",
                                                         SecretString="ray-token-of-the-stack")["ARN"]
    outputs = tf_outputs({
        "raylift_target": "ecs", "region": REGION, "model_bucket": bucket, "model_store_uri": f"s3://{bucket}/models",
        "ecr_repository_url": repo, "image_tag": "latest", "codebuild_project": f"{name}-ray-vllm",
        "ecs_cluster": name, "ecs_head_service": f"{name}-head", "ecs_worker_service": f"{name}-worker",
        "cloudmap_namespace": f"{name}.local", "cloudmap_service": "head", "gpus_per_node": 4,
        "airflow_role_arn": f"arn:aws:iam::{ACCOUNT}:role/{name}-airflow", "dashboard_name": name,
        "ray_auth_token_secret_arn": token,
    })  # fmt: skip
    # staging_image set: the staging task definition exists (modules/ecs_ray/staging.tf), its family an output
    return {"outputs": outputs, "from_tfvars": {"staging_image": {"ecs_staging_task_definition": f"{name}-model-staging"}}}


def make_eks_stack(name: str = "raylift-eks") -> dict[str, Any]:
    bucket = f"{name}-models-{ACCOUNT}"
    boto3.client("s3").create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION})
    repo = boto3.client("ecr").create_repository(repositoryName=f"{name}-ray-vllm")["repository"]["repositoryUri"]
    codebuild_projects(f"{name}-ray-vllm")
    ec2, eks = boto3.client("ec2"), boto3.client("eks")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    role = f"arn:aws:iam::{ACCOUNT}:role/{name}-node"
    eks.create_cluster(name=name, roleArn=role, resourcesVpcConfig={"subnetIds": [subnet]})
    groups = eks_node_groups()  # modules/eks_ray's node_groups default: key -> instance types
    for key, types in groups.items():
        eks.create_nodegroup(clusterName=name, nodegroupName=f"{name}-{key}", nodeRole=role, subnets=[subnet],
                             instanceTypes=types, scalingConfig={"minSize": 0, "maxSize": 4, "desiredSize": 0})
    outputs = tf_outputs({
        "raylift_target": "eks", "region": REGION, "model_bucket": bucket, "model_store_uri": f"s3://{bucket}/models",
        "ecr_repository_url": repo, "codebuild_project": f"{name}-ray-vllm", "eks_cluster": name,
        "eks_nodegroups": {key: f"{name}-{key}" for key in groups}, "eks_namespace": "raylift",
        "eks_service_account": "raylift-ray", "airflow_role_arn": f"arn:aws:iam::{ACCOUNT}:role/{name}-airflow",
        "dashboard_name": name, "ray_auth_secret": "ray-auth-token",
        "eks_serve_endpoint": "http://internal-raylift-eks-serve.elb.us-west-2.amazonaws.com:8000",
        "eks_staging_service_account": "raylift-model-staging",
    })  # fmt: skip
    return {"outputs": outputs, "from_tfvars": {"staging_image": {"staging_image": None}}}


def codebuild_projects(name: str) -> None:
    """modules/image_pipeline's two projects (x86_64 and <name>-arm64)."""
    for project in (name, f"{name}-arm64"):
        boto3.client("codebuild").create_project(
            name=project, source={"type": "S3", "location": f"{name}-sources/raylift.zip"},
            artifacts={"type": "NO_ARTIFACTS"}, serviceRole=f"arn:aws:iam::{ACCOUNT}:role/{name}-codebuild",
            environment={"type": "LINUX_CONTAINER", "image": "aws/codebuild/standard:7.0",
                         "computeType": "BUILD_GENERAL1_LARGE"},
        )  # fmt: skip


def aws_quick_start(target: str) -> str:
    """The quick start's blocks in order, each from the repository's root. EKS builds the staging image with the
    ECS section's block first, as its text says; its access entry for an existing role is not run (moto has none)."""
    ecs = bash_blocks(section(INFRA, "## Run on AWS ECS"))
    if target == "ecs":
        blocks = ecs
    else:
        image = [b for b in ecs if "docker build -f images/airflow/Dockerfile" in b]  # none: the checks below say so
        blocks = image + [b for b in bash_blocks(section(INFRA, "## Run on EKS")) if "create-access-entry" not in b]
    cleaned = [b.replace("/tmp/raylift-", "$QS_TMP/raylift-") for b in blocks]
    return "".join(f'cd "$QS_CHECKOUT"\n{block}' for block in cleaned)


def connection(quick: QuickStart, conn_id: str) -> dict[str, Any]:
    """The connection as Airflow keeps it (the CLI's view: the REST API masks the password)."""
    got = quick.server.stack.airflow("connections", "get", conn_id, "-o", "json", timeout=120)
    assert got.returncode == 0, got.stderr[-2000:]
    conn: dict[str, Any] = json.loads(got.stdout[got.stdout.index("["):])[0]
    conn["extra"] = conn.pop("extra_dejson")
    return conn


@pytest.mark.parametrize("target", ["ecs", "eks"])
def test_the_aws_quick_start_runs_on_the_scheduler(quick: QuickStart, target: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    started = time.monotonic()
    reset(quick.moto_url)
    for key, value in aws_env(quick.moto_url).items():
        monkeypatch.setenv(key, value)  # this process's boto3 (the stack's resources) talks to moto too
    state = make_ecs_stack() if target == "ecs" else make_eks_stack()
    state_path = tmp_path / "terraform-state.json"
    state_path.write_text(json.dumps(state))
    script = aws_quick_start(target)
    until_trigger, after = split_at_trigger(script)
    env = {"QS_TF_STATE": str(state_path), "QS_CHECKOUT": str(quick.checkout), "QS_TMP": str(tmp_path)}
    quick.as_created()
    before = quick.run_ids()
    ran = quick.bash(until_trigger, timeout=600, extra_env=env)
    assert ran.returncode == 0, f"the {target} quick start's steps failed:\n{ran.stdout[-3000:]}\n{ran.stderr[-3000:]}"
    run_id = quick.new_run(before)
    run = quick.wait(run_id, AWS_TIMEOUT_S)
    waited = quick.bash('cd "$QS_CHECKOUT"\n' + after, timeout=300, extra_env=env)  # the docs' list-runs
    assert "airflow dags list-runs raylift_deploy" in after, f"the {target} quick start shows no way to follow the run"
    assert waited.returncode == 0 and re.search(rf"{re.escape(run_id)}\s*\|\s*{run['state']}\b", waited.stdout), (
        waited.stdout[-2000:] + waited.stderr[-2000:])

    # where the docs' steps landed
    conf = run["conf"]
    conn = connection(quick, conf["cluster_conn_id"])
    extra = conn["extra"]
    assert conn["conn_type"] == "raylift_cluster" and extra.get("kind") == target, conn
    assert "staging" not in extra, f"the stack has no staging {('task', 'image')[target == 'eks']}: {extra}"
    docker_log = Path(quick.shell_env["QS_DOCKER_LOG"])
    pushed = [json.loads(line) for line in docker_log.read_text().splitlines()] if docker_log.exists() else []
    image = next((args[1] for args in reversed(pushed) if args[0] == "push"), None)
    assert image, "the quick start pushes no staging image"
    repo, tag = image.split("/", 1)[1].rsplit(":", 1)
    assert boto3.client("ecr").describe_images(repositoryName=repo, imageIds=[{"imageTag": tag}])["imageDetails"]
    if target == "ecs":
        secrets = boto3.client("secretsmanager")
        token_arn = state["outputs"]["ray_auth_token_secret_arn"]["value"]
        assert conn["password"] == secrets.get_secret_value(SecretId=token_arn)["SecretString"]
        assert extra["staging_task_definition"] == "raylift-ecs-model-staging", extra
        hub = [s for s in secrets.list_secrets()["SecretList"] if s["ARN"] != token_arn]
        assert [secrets.get_secret_value(SecretId=s["ARN"])["SecretString"] for s in hub] == [HF_TOKEN], hub
    else:
        assert extra["staging_image"] == image and extra.get("ray_auth_secret"), extra
        kubectl_log = Path(quick.shell_env["QS_KUBECTL_LOG"])
        kubectl = [json.loads(line) for line in kubectl_log.read_text().splitlines()] if kubectl_log.exists() else []
        created = [a for a in kubectl if a[:1] != ["get"] and "create" in a and "secret" in a]
        assert created and created[-1][created[-1].index("generic") + 1] == extra.get("hf_token_secret"), (
            f"the hub token's Secret and the connection's hf_token_secret differ: {created} {extra}")
        assert f"--from-literal=token={HF_TOKEN}" in created[-1]

    # the scheduler ran it, to its terminal state here: the build moto cannot run
    states = quick.server.task_states(DAG, run_id)
    assert run["state"] == "failed", quick.server.failure_report(DAG, run_id)
    assert states["check_hardware_profile"] == "success", quick.server.failure_report(DAG, run_id)
    profile = quick.server.xcom(DAG, run_id, "check_hardware_profile")
    if target == "ecs":
        assert profile["instances"] == [], profile  # created idle: no task runs yet, the deploy step checks again
    else:
        assert profile["serve_config"] == "llm-gpu.yaml" and profile["instances"] == eks_node_groups()["gpu"], profile
    if target == "ecs":  # the tag the tasks run is re-pointed at the build's image, which moto's build never pushed
        assert states["build_artifact"] == "failed", quick.server.failure_report(DAG, run_id)
        log = quick.failed_task_error(run_id, "build_artifact")
        assert "the build did not push its image" in log, log
        assert states["stage_model"] == "upstream_failed", states
    else:  # pods run the content tag itself; staging goes to a Job at the cluster's API, which moto does not serve
        assert states["build_artifact"] == "success", quick.server.failure_report(DAG, run_id)
        assert states["stage_model"] == "failed", quick.server.failure_report(DAG, run_id)
        log = quick.server.task_log(DAG, run_id, "stage_model")
        api = boto3.client("eks").describe_cluster(name=extra["cluster_name"])["cluster"]["endpoint"]
        host = urlsplit(api).hostname  # lower-cased, as urllib3 names it
        assert "create_namespaced_job" in log and f"Failed to resolve '{host}'" in log, (api, log[-4000:])
    assert states["acquire_cluster_lease"] == "upstream_failed", states  # nothing was scaled or applied
    quick.timings[target] = time.monotonic() - started
    print(f"{target} quick start: {run_id} {run['state']} in {quick.timings[target]:.0f} s: {states}")


def test_the_eks_access_entry_for_an_existing_role_is_terraforms_group() -> None:
    """The one step not run above: its group must be the one terraform's Role binding names."""
    entry = [b for b in bash_blocks(section(INFRA, "## Run on EKS")) if "create-access-entry" in b]
    assert len(entry) == 1, "the EKS quick start names no access entry for an existing Airflow role"
    group = re.search(r"--kubernetes-groups (\S+)", entry[0])
    access = (ROOT / "terraform/modules/eks_ray/access.tf").read_text()
    assert group and f'airflow_group = "{group[1]}"' in access, (group, "terraform/modules/eks_ray/access.tf")
    assert "--type STANDARD" in entry[0] and "--principal-arn" in entry[0]
