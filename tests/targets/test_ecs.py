"""EcsTarget against moto (ECS, ECR, CodeBuild, Cloud Map, S3) and a Ray dashboard stand-in on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from raylift.aws.content import image_content_digest, image_tag
from raylift.errors import ClusterError, ClusterNotReadyError, RayliftValueError
from raylift.records import Artifact
from raylift.targets import get_target
from raylift.targets.ecs import EcsTarget
from tests.aws.moto_resources import codebuild_project, ecr_repository, ecs_cluster, tool_target_options
from tests.fixtures.http_standin import JsonHandler, serve_http

BUCKET = "raylift-models"


def node(gpus: float, alive: bool = True) -> dict[str, Any]:
    return {"state": "ALIVE" if alive else "DEAD", "resources_total": {"CPU": 10.0, "GPU": gpus, "memory": 1e9}}


class Dashboard:
    """The Ray dashboard endpoints the target reads, with what a real head returns."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []
        self.applications: dict[str, Any] = {"applications": {}}
        self.puts: list[dict[str, Any]] = []


@pytest.fixture()
def dashboard() -> Iterator[tuple[Dashboard, int]]:
    state = Dashboard()

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/api/v0/nodes"):
                self._json({"data": {"result": {"result": state.nodes}}})
            elif self.path.startswith("/api/serve/applications/"):
                self._json(state.applications)
            elif self.path == "/api/version":
                self._json({"version": "4", "ray_version": "2.60.0"})
            else:
                self.send_error(404)

        def do_PUT(self) -> None:
            state.puts.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self._json({})

    with serve_http(Handler) as port:
        yield state, port


@pytest.fixture()
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A minimal checkout: the image's Dockerfile, the runtime lock and a serve app."""
    root = tmp_path / "repo"
    (root / "images/ray-vllm-gpu").mkdir(parents=True)
    (root / "images/ray-vllm-gpu/Dockerfile").write_text("FROM rayproject/ray:2.60.0-py311-gpu\n")
    (root / "requirements").mkdir()
    (root / "requirements/runtime.lock").write_text("vllm==0.11.0\n")
    (root / "serve_apps/llm").mkdir(parents=True)
    (root / "serve_apps/llm/__init__.py").write_text("def build_app(args):\n    ...\n")
    monkeypatch.setenv("RAYLIFT_ROOT", str(root))
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    return root


@pytest.fixture()
def infra(aws: str) -> None:
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    ecs_cluster("ray", {"ray-head": 0, "ray-worker": 0})
    codebuild_project("raylift-image")


def target(**extra: Any) -> EcsTarget:
    options = {"cluster": "ray", "bucket": BUCKET, "head_address": "127.0.0.1"} | extra
    t = get_target("ecs", **json.loads(json.dumps(options)))  # options are plain JSON, as the DAG passes them
    assert isinstance(t, EcsTarget)
    return t


def test_options_are_checked() -> None:
    with pytest.raises(RayliftValueError, match=r"\['colour'\] are not options of the ecs target: use bucket, cluster, "):
        EcsTarget(cluster="ray", bucket="b", head_address="h", colour="red")
    with pytest.raises(RayliftValueError, match="head_address' or 'cloud_map_namespace"):
        EcsTarget(cluster="ray", bucket="b")
    with pytest.raises(RayliftValueError, match="must be a bucket name"):
        EcsTarget(cluster="ray", bucket="s3://b/x", head_address="h")


def test_build_reuses_image_when_ecr_has_the_content_tag(infra: None, checkout: Path) -> None:
    tag = image_tag(image_content_digest(checkout, "ray-vllm-gpu"))
    uri = ecr_repository("ray-vllm", tags=(tag,))
    artifact = target().build_artifact()
    assert artifact.reused is True and artifact.image == f"{uri}:{tag}"
    assert boto3.client("codebuild").list_builds_for_project(projectName="raylift-image")["ids"] == []
    key = artifact.working_dir.removeprefix(f"s3://{BUCKET}/")
    assert key.startswith("artifacts/serve_apps-") and key.endswith(".zip")
    assert boto3.client("s3").head_object(Bucket=BUCKET, Key=key)["ContentLength"] > 0


def test_build_starts_codebuild_when_the_tag_is_new(infra: None, checkout: Path) -> None:
    uri = ecr_repository("ray-vllm", tags=("old",))
    t = target(build_poll_interval_s=0.01)
    artifact = t.build_artifact()
    assert artifact.reused is False
    assert artifact.image == f"{uri}:{image_tag(artifact.digest)}"
    assert len(boto3.client("codebuild").list_builds_for_project(projectName="raylift-image")["ids"]) == 1

    # an app edit is a new serve-app zip, not a new image (no Ray image copies serve_apps/: tests/aws/test_image_inputs.py)
    (checkout / "serve_apps/llm/__init__.py").write_text("def build_app(args):\n    return None\n")
    build = t.start_artifact_build()
    assert build.artifact.digest == artifact.digest and build.artifact.working_dir != artifact.working_dir
    (checkout / "images/ray-vllm-gpu/Dockerfile").write_text("FROM rayproject/ray:2.60.0-py311-gpu\nUSER 1000\n")
    build = t.start_artifact_build()
    assert build.build_id is not None and build.artifact.digest != artifact.digest  # an image edit is a new tag
    path, kwargs = t.build_trigger(build).serialize()
    assert path == "raylift.triggers.codebuild.CodeBuildBuildTrigger" and kwargs["image"] == build.artifact.image


def test_scale_waits_then_reports_ray_state(infra: None, dashboard: tuple[Dashboard, int]) -> None:
    state, port = dashboard
    t = target(dashboard_port=port)
    want = t.scale(workers=2)
    assert (want.nodes, want.resources) == (3, {"GPU": 12.0})  # the seed's 3 nodes / 12 GPUs
    counts = boto3.client("ecs").describe_services(cluster="ray", services=["ray-head", "ray-worker"])["services"]
    assert {s["serviceName"]: s["desiredCount"] for s in counts} == {"ray-head": 1, "ray-worker": 2}

    trigger = t.scale_trigger(poll_interval_s=0.05, timeout_s=5)

    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    assert asyncio.run(first())["status"] == "success"

    state.nodes = [node(4), node(4), node(4, alive=False)]
    with pytest.raises(ClusterNotReadyError, match=r"missing nodes 2/3, GPU 8/12 \(ECS: .*ray-worker 2/2 tasks running"):
        t.check_ready(want)
    state.nodes = [node(4), node(4), node(4)]
    ready = t.check_ready(want)
    assert (ready.nodes, ready.resources["GPU"]) == (3, 12.0)

    t.teardown()
    counts = boto3.client("ecs").describe_services(cluster="ray", services=["ray-head", "ray-worker"])["services"]
    assert {s["serviceName"]: s["desiredCount"] for s in counts} == {"ray-head": 0, "ray-worker": 0}


def test_serve_config_round_trip_and_deploy_trigger(infra: None, dashboard: tuple[Dashboard, int]) -> None:
    state, port = dashboard
    t = target(dashboard_port=port)
    app = {"name": "llm", "import_path": "llm:build_app", "runtime_env": {"working_dir": "s3://b/a.zip"}}
    state.applications = {"applications": {"llm": {"status": "RUNNING", "deployed_app_config": app}}}
    assert t.current_serve_config() == {"applications": [app]}
    t.apply_serve_config({"applications": [app]})
    assert state.puts == [{"applications": [app]}]
    path, kwargs = t.deploy_trigger(app_names=["llm"], timeout_s=60).serialize()
    assert path == "raylift.triggers.serve.ServeApplicationsTrigger"
    assert kwargs["dashboard_url"] == f"http://127.0.0.1:{port}" and kwargs["app_names"] == ["llm"]
    assert t.endpoint_url() == "http://127.0.0.1:8000"
    assert target(endpoint="https://llm.example.com/").endpoint_url() == "https://llm.example.com"


def test_head_found_through_cloud_map(aws: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # DiscoverInstances has a "data-" host prefix; against a local endpoint it must not be injected.
    conn = {"conn_type": "aws", "extra": {"region_name": "us-west-2", "endpoint_url": aws,
                                          "config_kwargs": {"inject_host_prefix": False}}}  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(conn))
    sd = boto3.client("servicediscovery")
    op = sd.create_http_namespace(Name="ray.local")["OperationId"]
    ns_id = sd.get_operation(OperationId=op)["Operation"]["Targets"]["NAMESPACE"]
    service_id = sd.create_service(Name="head", NamespaceId=ns_id)["Service"]["Id"]
    sd.register_instance(ServiceId=service_id, InstanceId="task-1", Attributes={"AWS_INSTANCE_IPV4": "10.0.3.7"})
    t = EcsTarget(cluster="ray", bucket=BUCKET, cloud_map_namespace="ray.local")
    assert t.dashboard_url() == "http://10.0.3.7:8265"
    assert t.endpoint_url() == "http://10.0.3.7:8000"


def test_stage_model_goes_to_the_model_prefix(infra: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text("{}")
    (src / "model.safetensors").write_bytes(b"\0" * 1024)
    staged = target(storage_class="STANDARD_IA").stage_model(source=str(src), model_id="tiny", revision="main")
    assert staged.uri == f"s3://{BUCKET}/models/tiny/main/sha256-{staged.digest[:16]}"
    head = boto3.client("s3").head_object(Bucket=BUCKET, Key=f"models/tiny/main/sha256-{staged.digest[:16]}/model.safetensors")
    assert head["StorageClass"] == "STANDARD_IA"


def test_the_stacks_outputs_through_the_tool_are_accepted(aws: str, checkout: Path) -> None:
    """``raylift_target_options`` as tools/tf_outputs_to_airflow.py prints it works as is."""
    tag = image_tag(image_content_digest(checkout, "ray-vllm-gpu"))
    repo = ecr_repository("raylift-ray-vllm", tags=(tag,))
    options, extra = tool_target_options(
        {
            "raylift_target": "ecs", "region": "us-west-2", "model_store_uri": "s3://stack-bucket/weights",
            "ecr_repository_url": repo, "image_tag": "latest", "codebuild_project": "raylift-ray-vllm",
            "ecs_cluster": "ray", "ecs_head_service": "head-svc", "ecs_worker_service": "worker-svc",
            "cloudmap_namespace": "ray.local", "cloudmap_service": "head", "gpus_per_node": 4,
        }
    )  # fmt: skip
    assert extra == {"region_name": "us-west-2"}
    t = get_target("ecs", **options)
    assert isinstance(t, EcsTarget)
    assert (t.aws.bucket, t.aws.model_prefix, t.aws.region_name) == ("stack-bucket", "weights", "us-west-2")
    assert (t.aws.ecr_repository, t.aws.codebuild_project) == ("raylift-ray-vllm", "raylift-ray-vllm")
    assert (t.cluster, t.head_service, t.worker_service) == ("ray", "head-svc", "worker-svc")
    assert (t.cloud_map_namespace, t.cloud_map_service, t.image_tag) == ("ray.local", "head", "latest")
    assert t.expectation(2).resources == {"GPU": 12.0}
    assert t.model_store_uri() == "s3://stack-bucket/weights"
    # the build step re-points the moving tag the task definition runs at the content tag
    artifact = t.finish_build(Artifact(digest="d", working_dir="s3://b/a.zip", image=f"{repo}:{tag}", reused=True))
    assert artifact.image == f"{repo}:{tag}"
    details = boto3.client("ecr").describe_images(repositoryName="raylift-ray-vllm")["imageDetails"]
    assert [sorted(d["imageTags"]) for d in details] == [sorted([tag, "latest"])]


def test_serve_binds_where_the_target_says() -> None:
    assert target().serve_cluster_options() == {"http_options": {"host": "0.0.0.0", "port": 8000}}  # from the VPC
    assert target(serve_host="127.0.0.1", serve_port=9000).serve_cluster_options() == {
        "http_options": {"host": "127.0.0.1", "port": 9000}}


def test_deploy_trigger_counts_from_the_submission_not_from_its_own_creation(
    infra: None, dashboard: tuple[Dashboard, int]
) -> None:
    """Serve stamps a deploy when it receives the PUT; a trigger made later must still accept it."""
    state, port = dashboard
    t = target(dashboard_port=port)
    before = time.time()
    t.apply_serve_config({"applications": []})
    time.sleep(1.5)  # a busy worker: more than the trigger's 1 s tolerance between PUT and trigger
    _, kwargs = t.deploy_trigger(app_names=["llm"], timeout_s=60).serialize()
    assert before <= kwargs["submitted_at"] <= before + 1


def container_instances(instance_types: list[str], cluster: str = "ray") -> list[str]:
    """EC2 instances of ``instance_types`` launched in moto and registered with ``cluster`` as the ECS
    agent registers them (its identity document); their container instance ARNs, in order."""
    ec2, ecs = boto3.client("ec2"), boto3.client("ecs")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    arns = []
    for instance_type in instance_types:
        instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType=instance_type)["Instances"][0]
        document = {"instanceId": instance["InstanceId"], "instanceType": instance_type, "region": "us-west-2"}
        registered = ecs.register_container_instance(cluster=cluster, instanceIdentityDocument=json.dumps(document))
        arns.append(registered["containerInstance"]["containerInstanceArn"])
    return arns


def service_tasks(service: str, on: list[str]) -> None:
    """One task of ``service`` on each container instance in ``on`` (an ARN twice: two tasks there). moto's
    services start no tasks, so they are placed by hand, in the group ECS gives a service's tasks."""
    for arn in on:
        boto3.client("ecs").start_task(
            cluster="ray", taskDefinition="ray", containerInstances=[arn], group=f"service:{service}", startedBy="ecs-svc/1"
        )


def test_billed_nodes_are_the_distinct_instances_running_the_services(infra: None) -> None:
    t = target()
    assert t.billed_nodes() == {}  # no task runs: nothing to bill for this cluster
    launched = {"head": "m5.xlarge", "worker-a": "g5.12xlarge", "worker-b": "g5.12xlarge", "idle": "c7i.8xlarge"}
    arn = dict(zip(launched, container_instances(list(launched.values()))))
    service_tasks("ray-head", [arn["head"]])
    service_tasks("ray-worker", [arn["worker-a"], arn["worker-a"], arn["worker-b"]])  # two workers share one instance
    # moto's ListTasks ignores serviceName (it returns every task of the cluster), so what the hook asks for is
    # checked on the request itself: the two services, by name.
    asked: list[str | None] = []
    t._ecs().conn.meta.events.register(
        "provide-client-params.ecs.ListTasks", lambda params, **_: asked.append(params.get("serviceName"))
    )
    billed = t.billed_nodes()
    assert billed == dict(Counter(launched[name] for name in ("head", "worker-a", "worker-b")))  # not "idle"
    assert asked == ["ray-head", "ray-worker"]
    boto3.client("ecs").run_task(  # a worker on Fargate: no container instance, no instance type to price
        cluster="ray", taskDefinition="ray", launchType="FARGATE", group="service:ray-worker", count=1
    )
    with pytest.raises(ClusterError, match="1 task.s. of ECS services ray-head and ray-worker in 'ray' run on Fargate"):
        t.billed_nodes()  # a cost without them would be too low: unknown instead


def test_instance_type_comes_from_ec2_when_the_attribute_is_absent(infra: None) -> None:
    head, worker = container_instances(["m5.xlarge", "g5.xlarge"])
    ecs = boto3.client("ecs")
    # The ECS agent sets ecs.instance-type on EC2 container instances; moto derives it from the EC2 instance and
    # lets a test delete it, which leaves DescribeInstances as the only source of the worker's type.
    ecs.delete_attributes(
        cluster="ray", attributes=[{"name": "ecs.instance-type", "value": "g5.xlarge", "targetId": worker}]
    )
    described = ecs.describe_container_instances(cluster="ray", containerInstances=[worker])["containerInstances"]
    assert "ecs.instance-type" not in {a["name"] for a in described[0]["attributes"]}
    service_tasks("ray-head", [head])
    service_tasks("ray-worker", [worker])
    assert target().billed_nodes() == {"m5.xlarge": 1, "g5.xlarge": 1}


def test_billed_nodes_of_a_missing_cluster_is_a_cluster_error(infra: None) -> None:
    with pytest.raises(ClusterError, match="ECS cluster 'nowhere' or its service.*check the target options"):
        target(cluster="nowhere").billed_nodes()


def test_engine_args_are_said_to_be_unchecked_before_the_deploy(caplog: pytest.LogCaptureFixture) -> None:
    """ECS cannot run vLLM before the deploy: the task log says so rather than implying a check that never ran."""
    from raylift.targets.base import Target

    with caplog.at_level("WARNING"):
        Target.validate_engine_args(EcsTarget.__new__(EcsTarget), "s3://b/m", {"max_model_len": 8192})
    assert "engine_args ['max_model_len'] are not checked before the deploy on target 'ecs'" in caplog.text
