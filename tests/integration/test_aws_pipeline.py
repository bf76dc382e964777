"""raylift_deploy on target=ecs and target=eks, end to end: real Airflow (`airflow dags test`), a real
moto server process for every AWS call (S3, STS, ECR, CodeBuild, ECS, Cloud Map, EKS, EC2), the
Kubernetes API stand-in in operator mode, and a real local Ray cluster with vLLM playing the cloud's
Ray head: the one thing that cannot run here.

- ECS: Cloud Map (moto) registers the "head task" at 127.0.0.1; the DAG finds the dashboard through
  it and deploys through the Serve REST API exactly as on AWS. The image's content tag is already in
  ECR (an earlier build), so the build is skipped and the moving tag the task definition runs is
  re-pointed at it.
- EKS: the EKS stack's own ECR repository lacks the tag, so CodeBuild (moto) builds and the task
  defers on the build trigger. The RayService is server-side applied to the stand-in, which does
  what KubeRay does with it: submits serveConfigV2 to the Ray cluster and reports Serve's statuses.
- Both: the serve-app zip and the model are staged to S3 (moto) by the DAG, Ray fetches the zip as
  the s3:// working_dir and the replica streams the model from s3:// (load_format runai_streamer).
- Target options come from terraform-output-shaped JSON through tools/tf_outputs_to_airflow.py, the
  documented path; only the ports of the stand-in cluster are added.
- Bad input: a model source in a bucket that does not exist fails stage_model naming the bucket, and
  nothing serving is touched.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
import yaml
from botocore.config import Config

from tests.aws.moto_resources import tool_target_options
from tests.fixtures.kube_api import KubeApiStandIn, RayOperator, kube_api_standin
from tests.harness.local_stack import ROOT, LocalStack, make_stack, stop_cluster, tiny_model_path
from tests.harness.moto_server import aws_env, reset
from tests.integration.conftest import PlainVllm
from tests.serve_apps import openai_conformance as oc

pytestmark = pytest.mark.integration

PORT_BASE = 25000  # this module's ports: 25000-25999 (serve 25010, dashboard 25265, gcs 25379, ...)
REGION = "us-west-2"
ROLE = "arn:aws:iam::123456789012:role/raylift"
NAMESPACE, RAYSERVICE = "raylift", "raylift"
DAG_TIMEOUT_S = 600


@dataclass
class Cloud:
    """The moto resources two terraform stacks would have made, and the options the tool derived."""

    stack: LocalStack
    kube: KubeApiStandIn
    operator: RayOperator
    ecs_options: dict[str, Any]
    eks_options: dict[str, Any]
    content_tag: str  # the image inputs' content tag (same checkout: same tag in both stacks)

    @property
    def serve_url(self) -> str:
        return self.stack.serve_url


def client(name: str, url: str) -> Any:
    return boto3.client(
        name, endpoint_url=url, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing",
        config=Config(inject_host_prefix=False),
    )  # fmt: skip


def create_ecs_stack(url: str, *, content_tag: str) -> dict[str, Any]:
    """Model bucket, image pipeline (ECR + CodeBuild), ECS cluster + services, Cloud Map: the ECS example."""
    client("s3", url).create_bucket(Bucket="raylift-ecs-models", CreateBucketConfiguration={"LocationConstraint": REGION})
    ecr = client("ecr", url)
    repo = ecr.create_repository(repositoryName="raylift-ecs-ray-vllm")["repository"]["repositoryUri"]

    def push(tag: str, config_digest: str) -> None:  # what an earlier CodeBuild build pushed
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 7, "digest": config_digest},
            "layers": [],
        }
        ecr.put_image(repositoryName="raylift-ecs-ray-vllm", imageManifest=json.dumps(manifest), imageTag=tag)

    push("latest", "sha256:" + "b" * 64)  # the moving tag points at an older image
    push(content_tag, "sha256:" + "a" * 64)
    codebuild_project(url, "raylift-ecs-ray-vllm")
    ecs = client("ecs", url)
    ecs.create_cluster(clusterName="raylift")
    ecs.register_task_definition(family="ray", containerDefinitions=[{"name": "ray", "image": f"{repo}:latest", "memory": 512}])
    for service in ("raylift-head", "raylift-worker"):
        ecs.create_service(cluster="raylift", serviceName=service, taskDefinition="ray", desiredCount=0)
    sd = client("servicediscovery", url)
    op = sd.create_private_dns_namespace(Name="raylift.local", Vpc="vpc-0raylift")["OperationId"]
    ns = sd.get_operation(OperationId=op)["Operation"]["Targets"]["NAMESPACE"]
    dns = {"RoutingPolicy": "MULTIVALUE", "DnsRecords": [{"Type": "A", "TTL": 10}]}
    service_id = sd.create_service(Name="head", NamespaceId=ns, DnsConfig=dns)["Service"]["Id"]
    # ECS registers the head task's private IP; here the "task" is the local Ray head on loopback.
    sd.register_instance(ServiceId=service_id, InstanceId="head-task", Attributes={"AWS_INSTANCE_IPV4": "127.0.0.1"})
    return {
        "raylift_target": "ecs", "region": REGION, "model_bucket": "raylift-ecs-models",
        "model_store_uri": "s3://raylift-ecs-models/models", "ecr_repository_url": repo, "image_tag": "latest",
        "codebuild_project": "raylift-ecs-ray-vllm", "ecs_cluster": "raylift", "ecs_head_service": "raylift-head",
        "ecs_worker_service": "raylift-worker", "cloudmap_namespace": "raylift.local", "cloudmap_service": "head",
        "gpus_per_node": 0, "airflow_role_arn": None, "dashboard_name": "raylift-ecs",
    }  # fmt: skip


def create_eks_stack(url: str) -> dict[str, Any]:
    """Model bucket, image pipeline, EKS cluster with the gpu/graviton/inferentia node groups: the EKS example."""
    client("s3", url).create_bucket(Bucket="raylift-eks-models", CreateBucketConfiguration={"LocationConstraint": REGION})
    repo = client("ecr", url).create_repository(repositoryName="raylift-eks-ray-vllm")["repository"]["repositoryUri"]
    codebuild_project(url, "raylift-eks-ray-vllm")
    ec2, eks = client("ec2", url), client("eks", url)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    eks.create_cluster(name="raylift", roleArn=ROLE, resourcesVpcConfig={"subnetIds": [subnet]})
    groups = {"gpu": ("g5.12xlarge", 4), "graviton": ("c7g.8xlarge", 2), "inferentia": ("inf2.48xlarge", 1)}
    for key, (instance_type, max_size) in groups.items():
        eks.create_nodegroup(
            clusterName="raylift", nodegroupName=f"raylift-{key}", nodeRole=ROLE, subnets=[subnet],
            instanceTypes=[instance_type], scalingConfig={"minSize": 0, "maxSize": max_size, "desiredSize": 0},
        )  # fmt: skip
    return {
        "raylift_target": "eks", "region": REGION, "model_bucket": "raylift-eks-models",
        "model_store_uri": "s3://raylift-eks-models/models", "ecr_repository_url": repo,
        "codebuild_project": "raylift-eks-ray-vllm", "eks_cluster": "raylift",
        "eks_nodegroups": {key: f"raylift-{key}" for key in groups}, "eks_namespace": NAMESPACE,
        "eks_service_account": "ray", "airflow_role_arn": None, "dashboard_name": "raylift-eks",
    }  # fmt: skip


def codebuild_project(url: str, name: str) -> None:
    client("codebuild", url).create_project(
        name=name,
        source={"type": "S3", "location": f"{name}-sources/raylift.zip", "buildspec": "images/buildspec.yml"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={"type": "LINUX_CONTAINER", "image": "aws/codebuild/standard:7.0", "computeType": "BUILD_GENERAL1_LARGE"},
        serviceRole=ROLE,
    )


class RayHeadBoot:
    """Start the local Ray head in the background, retrying like ECS restarts a task that failed to start:
    on a machine this busy, Ray's fixed 30 s raylet registration wait is sometimes too short."""

    ATTEMPTS = 3

    def __init__(self, stack: LocalStack) -> None:
        self.stack, self.stopping = stack, threading.Event()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = (stack.home / "ray-boot.log").open("ab")
        self.thread = threading.Thread(target=self._run, name="ray-head-boot", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        code = "from raylift.local.cluster import LocalRayCluster; from raylift.config import local_settings; "
        code += "LocalRayCluster(local_settings()).scale(0)"
        for _ in range(self.ATTEMPTS):
            if self.stopping.is_set():
                return
            self.proc = subprocess.Popen(
                [sys.executable, "-c", code], env=self.stack.env, stdout=self.log, stderr=self.log, start_new_session=True
            )
            if self.proc.wait() == 0:
                return
            stop_cluster(self.stack)  # a head that failed to register: stop what it left, start again

    def stop(self) -> None:
        self.stopping.set()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        self.thread.join(60)
        self.log.close()


@pytest.fixture(scope="module")
def cloud(moto_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    from raylift.aws.content import image_content_digest, image_tag

    started = time.monotonic()
    reset(moto_url)
    home = tmp_path_factory.mktemp("aws")
    stack = make_stack(home, port_base=PORT_BASE)
    # the image of the confs' profile (llm-cpu.yaml, below): the CPU image (raylift.aws.images)
    content_tag = image_tag(image_content_digest(ROOT, "ray-vllm-cpu"))
    ecs_options, ecs_extra = tool_target_options(create_ecs_stack(moto_url, content_tag=content_tag))
    eks_options, _ = tool_target_options(create_eks_stack(moto_url))
    with kube_api_standin() as kube:
        env = aws_env(moto_url)
        # The tool's connection (region only) plus what a moto endpoint needs; credentials stay in the
        # default chain (env), as the docs say. Cloud Map's "data-" host prefix cannot resolve locally.
        extra = ecs_extra | {"endpoint_url": moto_url, "config_kwargs": {"inject_host_prefix": False}}
        env["AIRFLOW_CONN_AWS_DEFAULT"] = json.dumps({"conn_type": "aws", "extra": extra})
        env["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config": kube.kubeconfig(NAMESPACE)}}
        )
        env["RAYLIFT_MODEL_CACHE"] = str(home / "replica-model-cache")  # the replicas' node-local cache
        # the local Ray nodes inherit no credential of the worker's (issue 57): the stand-in cloud head's keys are
        # given to them by name, as an ECS head's task role would be
        env["RAYLIFT_RAY_NODE_ENV"] = "AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY"
        stack.env.update(env)
        stack.start_warm_cli()  # with the cloud's environment: it warms up while the Ray head boots
        # The stand-in of the in-cloud Ray head: a real local cluster whose processes (the runtime env
        # agent fetching s3:// working dirs, the replicas pulling s3:// models) reach moto through env.
        # It boots while the first DAG run starts, as an ECS head task would: the ready sensor waits for it.
        booting = RayHeadBoot(stack)
        try:
            print(f"cloud set up (moto resources, Airflow db; Ray head booting) in {time.monotonic() - started:.0f}s")
            serve_port = int(stack.env["RAYLIFT_SERVE_PORT"])
            operator = kube.operate(stack.dashboard_url, {"host": "127.0.0.1", "port": serve_port})
            yield Cloud(
                stack=stack,
                kube=kube,
                operator=operator,
                ecs_options=ecs_options
                | {"dashboard_port": int(stack.env["RAYLIFT_DASHBOARD_PORT"]), "serve_port": serve_port,
                   "serve_host": "127.0.0.1", "scale_poll_interval_s": 1, "build_poll_interval_s": 1},
                eks_options=eks_options
                | {"kubernetes_conn_id": "kubernetes_default", "endpoint": stack.serve_url, "poll_interval_s": 2,
                   "build_poll_interval_s": 1},
                content_tag=content_tag,
            )  # fmt: skip
        finally:
            booting.stop()
            stop_cluster(stack)


def conf(target: str, options: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    base = {
        "target": target,
        "target_options": options,
        "model_source": str(tiny_model_path()),
        "model_id": "test/tiny-llama",
        "served_name": f"tiny-{target}",
        "replicas": 1,
        "workers": 0,
        "concurrency": [1],
        "requests_per_level": 3,
        # about the AWS targets, not the release gate: applied directly, SLOs only (3 requests cannot be judged)
        "release": "direct",
        "regression_baseline": "none",
        # the "cluster" is a CPU Ray standing for GPU instances (moto's node group is g5): name the CPU profile,
        # which raylift allows on GPU instances with a warning (auto would pick llm-gpu.yaml)
        "serve_config": "llm-cpu.yaml",
    }
    return base | overrides


def run_dag(cloud: Cloud, dag_id: str, conf_: dict[str, Any]) -> tuple[int, str]:
    started = time.monotonic()
    try:
        result = cloud.stack.dags_test(dag_id, conf_, timeout=DAG_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:  # keep what it printed: the reason is in there
        partial = "".join(x.decode() if isinstance(x, bytes) else x for x in (exc.stdout or "", exc.stderr or ""))
        (cloud.stack.home / f"timed-out-{dag_id}-{conf_.get('target')}.log").write_text(partial)
        raise AssertionError(f"{dag_id} ran over {DAG_TIMEOUT_S}s; its output: {partial[-3000:]}") from None
    out = result.stdout + result.stderr
    print(f"{dag_id} target={conf_.get('target')}: exit {result.returncode} in {time.monotonic() - started:.0f}s")
    return result.returncode, out


def failure_lines(out: str) -> str:
    return "\n".join(line for line in out.splitlines() if "Error" in line or "error" in line)[-4000:]


def chat(url: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=30,
    )


def s3_json(cloud: Cloud, bucket: str, key: str) -> dict[str, Any]:
    body = client("s3", cloud.stack.env["AWS_ENDPOINT_URL"]).get_object(Bucket=bucket, Key=key)["Body"].read()
    return json.loads(body)


def latest_record(cloud: Cloud, bucket: str) -> dict[str, Any]:
    s3 = client("s3", cloud.stack.env["AWS_ENDPOINT_URL"])
    objs = s3.list_objects_v2(Bucket=bucket, Prefix="raylift/_raylift/runs/").get("Contents") or []
    records = sorted((o for o in objs if o["Key"].endswith("/record.json")), key=lambda o: o["LastModified"])
    assert records, f"no run record in s3://{bucket}/raylift/_raylift/runs/"
    return s3_json(cloud, bucket, records[-1]["Key"])


def serve_app(cloud: Cloud, name: str = "llm") -> dict[str, Any]:
    apps = httpx.get(f"{cloud.stack.dashboard_url}/api/serve/applications/", timeout=10).json()["applications"]
    return apps.get(name) or {}


# -- streaming from the stage: the oracle is plain vLLM on the same files, loaded its default way ----------------
# (tests/integration/conftest.py: plain_vllm, recorded once for this module and test_serve_apps)


# The suite's other lane (tools/test.sh) runs beside this one; its tests stage the same tiny model into their own
# temp folders, which no replica writes into.
OTHER_LANES = [ROOT / "var/test-tmp/light", ROOT / "var/test-tmp/multi"]


def weight_files_written_since(marker: Path, size: int) -> list[str]:
    """Every file on the root filesystem modified after ``marker`` with the weight file's exact size: a copy of the
    weights under any name (the other lane's temp folders left out)."""
    prune = [arg for lane in OTHER_LANES for arg in ("-path", str(lane), "-o")][:-1]
    found = subprocess.run(
        ["find", "/", "-xdev", "(", *prune, ")", "-prune", "-o", "-newer", str(marker), "-type", "f", "-size",
         f"{size}c", "-print"], capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return sorted(found.stdout.split())


def test_ecs_deploy_through_cloud_map_and_the_serve_rest_api(cloud: Cloud, plain_vllm: PlainVllm) -> None:
    url = cloud.stack.env["AWS_ENDPOINT_URL"]
    marker = cloud.stack.home / "ecs-run-started"
    marker.write_text("")
    time.sleep(1.1)  # find -newer compares mtimes: anything written from here on is newer
    code, out = run_dag(cloud, "raylift_deploy", conf("ecs", cloud.ecs_options))
    assert code == 0, failure_lines(out)

    record = latest_record(cloud, "raylift-ecs-models")
    assert record["target"] == "ecs"
    assert set(record["steps"].values()) == {"done"}, record["steps"]
    # build: skipped (the content tag was in ECR); the moving tag the tasks run now points at it
    assert record["artifact"]["reused"] is True
    assert record["artifact"]["image"].endswith(f"/raylift-ecs-ray-vllm:{cloud.content_tag}")
    ecr = client("ecr", url)
    images = ecr.describe_images(repositoryName="raylift-ecs-ray-vllm")["imageDetails"]
    assert any({"latest", cloud.content_tag} <= set(i.get("imageTags", [])) for i in images), images
    assert client("codebuild", url).list_builds_for_project(projectName="raylift-ecs-ray-vllm")["ids"] == []
    # stage: the model and its manifest in S3
    assert record["model"]["uri"].startswith("s3://raylift-ecs-models/models/test--tiny-llama/local/sha256-")
    model_key = record["model"]["uri"].removeprefix("s3://raylift-ecs-models/")
    manifest = s3_json(cloud, "raylift-ecs-models", f"{model_key}/raylift-manifest.json")
    assert manifest["complete"] is True and "model.safetensors" in manifest["files"]
    # scale: the head service asked for one task, the workers for none
    services = client("ecs", url).describe_services(cluster="raylift", services=["raylift-head", "raylift-worker"])
    assert {s["serviceName"]: s["desiredCount"] for s in services["services"]} == {"raylift-head": 1, "raylift-worker": 0}
    # deploy: Serve runs the app from the s3:// zip with the s3:// model, endpoint found through Cloud Map
    app = serve_app(cloud)
    assert app["status"] == "RUNNING"
    assert app["deployed_app_config"]["runtime_env"]["working_dir"].startswith("s3://raylift-ecs-models/artifacts/")
    assert app["deployed_app_config"]["args"]["model"] == record["model"]["uri"]
    assert record["endpoint"] == cloud.serve_url
    assert record["smoke"]["chat"]["usage"]["completion_tokens"] > 0
    assert record["benchmark"]["overall"]["errors"] == 0 and record["benchmark"]["overall"]["output_tokens"] > 0
    # the replica streamed the weights from the staged s3:// prefix (load_format runai_streamer): no weight file
    # was written anywhere on this machine's disk while the run staged, deployed and served (the node-local
    # cache of the download path stays empty), and its temperature-0 answers are plain vLLM's on the same files
    assert app["deployed_app_config"]["args"]["engine_args"]["load_format"] == "runai_streamer"
    weights = manifest["files"]["model.safetensors"]["size"]
    assert not (Path(cloud.stack.env["RAYLIFT_MODEL_CACHE"]) / "raylift-ecs-models").exists()
    assert weight_files_written_since(marker, weights) == []
    assert oc.greedy_texts(cloud.serve_url, "tiny-ecs") == plain_vllm.greedy
    assert chat(cloud.serve_url, "tiny-ecs").status_code == 200


def test_eks_deploy_builds_in_codebuild_and_applies_a_rayservice(cloud: Cloud) -> None:
    url = cloud.stack.env["AWS_ENDPOINT_URL"]
    puts_before = len(cloud.operator.puts)
    # no torch.compile (as tests/integration/test_local_pipeline.py): the ECS run before it compiles the same graphs
    # and compares with plain vLLM; this one is about CodeBuild, the node group and the RayService
    code, out = run_dag(cloud, "raylift_deploy", conf("eks", cloud.eks_options, workers=1,
                                                     engine_args={"enforce_eager": True}))
    assert code == 0, failure_lines(out)

    record = latest_record(cloud, "raylift-eks-models")
    assert record["target"] == "eks" and set(record["steps"].values()) == {"done"}, record["steps"]
    # build: the tag was new to this stack's repository, so CodeBuild built it (the task deferred meanwhile)
    builds = client("codebuild", url).list_builds_for_project(projectName="raylift-eks-ray-vllm")["ids"]
    assert len(builds) == 1
    assert record["artifact"]["reused"] is False
    assert record["artifact"]["image"].endswith(f"/raylift-eks-ray-vllm:{cloud.content_tag}")  # same inputs
    assert "deferring until the build ends" in out and f"build {builds[0]} succeeded" in out
    # scale: one g5.12xlarge (4 GPUs) holds the profile's one-GPU worker pod
    ng = client("eks", url).describe_nodegroup(clusterName="raylift", nodegroupName="raylift-gpu")["nodegroup"]
    assert ng["scalingConfig"]["desiredSize"] == 1
    # deploy: the applied RayService carries the image, the pods' service account and the same Serve config
    rayservice = cloud.kube.stored(NAMESPACE, RAYSERVICE)
    assert rayservice is not None
    spec = rayservice["spec"]
    head = spec["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["image"] == record["artifact"]["image"] and head["serviceAccountName"] == "ray"
    serve_config = yaml.safe_load(spec["serveConfigV2"])
    app_config = serve_config["applications"][0]
    assert app_config["args"]["model"].startswith("s3://raylift-eks-models/models/test--tiny-llama/local/sha256-")
    assert app_config["runtime_env"]["working_dir"].startswith("s3://raylift-eks-models/artifacts/")
    assert "port" not in (serve_config.get("http_options") or {})  # KubeRay owns it
    # the "operator" submitted exactly that config; the RayService reports Ready with the app RUNNING
    assert len(cloud.operator.puts) == puts_before + 1
    assert cloud.operator.puts[-1]["applications"] == serve_config["applications"]
    status = rayservice["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "True"
    assert status["activeServiceStatus"]["applicationStatuses"]["llm"]["status"] == "RUNNING"
    assert record["endpoint"] == cloud.serve_url and record["smoke"]["chat"]["usage"]["completion_tokens"] > 0
    assert chat(cloud.serve_url, "tiny-eks").status_code == 200


def test_missing_model_bucket_fails_staging_and_touches_nothing_serving(cloud: Cloud) -> None:
    before_app = serve_app(cloud)
    before_rs = cloud.kube.stored(NAMESPACE, RAYSERVICE)
    assert before_app.get("status") == "RUNNING" and before_rs is not None, "needs the EKS deploy before it"
    puts = len(cloud.operator.puts)
    code, out = run_dag(
        cloud, "raylift_deploy", conf("eks", cloud.eks_options, workers=1, model_source="s3://raylift-no-such-bucket/tiny")
    )
    assert code != 0
    assert "Model source bucket 'raylift-no-such-bucket' does not exist" in out, failure_lines(out)
    steps = latest_record(cloud, "raylift-eks-models")["steps"]  # the run record is written on failure too
    assert (steps["artifact"], steps["model"], steps["deployed"]) == ("done", "missing", "missing"), steps
    # nothing serving was touched: same RayService spec, same Serve deploy, still answering
    after_rs = cloud.kube.stored(NAMESPACE, RAYSERVICE)
    assert after_rs["metadata"]["generation"] == before_rs["metadata"]["generation"]
    assert after_rs["spec"] == before_rs["spec"] and len(cloud.operator.puts) == puts
    assert serve_app(cloud)["last_deployed_time_s"] == before_app["last_deployed_time_s"]
    assert chat(cloud.serve_url, "tiny-eks").status_code == 200


def test_eks_teardown_deletes_the_rayservice_and_empties_the_node_group(cloud: Cloud) -> None:
    url = cloud.stack.env["AWS_ENDPOINT_URL"]  # (ECS teardown, scaling both services to 0: tests/targets)
    code, out = run_dag(cloud, "raylift_teardown", {"target": "eks", "target_options": cloud.eks_options})
    assert code == 0, failure_lines(out)
    ng = client("eks", url).describe_nodegroup(clusterName="raylift", nodegroupName="raylift-gpu")["nodegroup"]
    assert ng["scalingConfig"]["desiredSize"] == 0
    assert cloud.kube.stored(NAMESPACE, RAYSERVICE) is None
    assert serve_app(cloud) == {}  # KubeRay deleted the cluster: no app left on it
