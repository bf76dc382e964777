"""The image follows the profile: the ``check_hardware_profile`` step chooses the image that runs the run's Serve
config (GPU -> ray-vllm-gpu, Neuron -> ray-neuron, Graviton -> ray-llamacpp-arm64, CPU -> ray-vllm-cpu), the build
step builds that one and the deploy step renders it, and a target option ``image_name`` that contradicts the profile
is refused before anything is built or applied.

The instances are moto's (EKS node groups, ECS container instances), their shapes moto's EC2 instance-type data; what
is asserted about the build is CodeBuild's StartBuild request as moto received it (seen by the proxy in front of it),
and the rendered RayService is the manifest the EKS target would apply.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from airflow.exceptions import TaskDeferred
from airflow.sdk import DAG

from raylift.aws.content import image_content_digest, image_platform, image_tag
from raylift.aws.images import DEFAULT_IMAGE, PROFILE_IMAGES, ImageProfileError, choose_image, profile_image
from raylift.operators.build import BuildArtifactOperator
from raylift.operators.cluster import ScaleClusterOperator
from raylift.operators.profile import HardwareProfileOperator
from raylift.serve.config import load_config
from raylift.serve.hardware import HardwareProfileError
from tests.aws.moto_resources import codebuild_project, ecr_repository, ecs_cluster, eks_nodegroups
from tests.aws.standins import Proxy
from tests.aws.test_hardware_profile import NODEGROUPS, deploy_op
from tests.targets.test_ecs import container_instances, service_tasks

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "serve_apps" / "configs"
BUCKET = "raylift-models"
REPO = "ray-vllm"


class TI:
    """The task instance's XCom, as Airflow resolves an XComArg (pull by task id) and the operators push by key."""

    def __init__(self) -> None:
        self.xcoms: dict[str, Any] = {}

    def xcom_pull(self, task_ids: str | None = None, key: str = "return_value", **_: Any) -> Any:
        return self.xcoms.get(f"{task_ids}/{key}")

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[f"build_artifact/{key}"] = value


@pytest.fixture()
def infra(s3_proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Proxy:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAYLIFT_ROOT", raising=False)
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    eks_nodegroups("ray", NODEGROUPS)
    ecr_repository(REPO)
    codebuild_project("raylift-image")
    codebuild_project("raylift-image-arm64")
    return s3_proxy


def eks_options(nodegroup: str, **extra: Any) -> dict[str, Any]:
    profile = {"graviton": "graviton", "inferentia": "inf2"}.get(nodegroup, "gpu-vllm")
    return {"cluster_name": "ray", "worker_nodegroup": nodegroup, "kubernetes_conn_id": "kubernetes_default",
            "namespace": "raylift", "rayservice_name": "llm", "bucket": BUCKET, "ecr_repository": REPO,
            "profile": profile, **extra}  # fmt: skip


def run_check_and_build(proxy: Proxy, target: str, options: dict[str, Any], serve_config: str = "auto"
                        ) -> tuple[dict[str, Any], dict[str, str], dict[str, Any], TI, DAG]:
    """The release's first two steps as Airflow runs them (pre_execute, then execute; the build defers on CodeBuild):
    the check step's XCom, and the StartBuild request moto received (its env overrides, the request)."""
    with DAG("raylift_deploy_test", schedule=None) as dag:
        check = HardwareProfileOperator(task_id="check_hardware_profile", target=target, target_options=options,
                                        serve_config=serve_config)  # fmt: skip
        build = BuildArtifactOperator(task_id="build_artifact", target=target, target_options=options,
                                      chosen_profile=check.output, deferrable=True)  # fmt: skip
    ti = TI()
    context = {"run_id": "manual__1", "ti": ti}
    check.pre_execute(context)
    record = check.execute(context)
    ti.xcoms["check_hardware_profile/return_value"] = record
    before = len(proxy.bodies)
    build.render_template_fields(context)  # Airflow resolves check.output to the check step's XCom
    build.pre_execute(context)
    with pytest.raises(TaskDeferred):
        build.execute(context)
    [body] = [b for t, b in proxy.bodies[before:] if t.endswith(".StartBuild")]
    sent = json.loads(body)
    return record, {e["name"]: e["value"] for e in sent["environmentVariablesOverride"]}, sent, ti, dag


def start(op: Any, ti: TI) -> None:
    """A later step of the run as Airflow starts it: its XComArgs resolved, then ``pre_execute``."""
    context = {"run_id": "manual__1", "ti": ti}
    op.render_template_fields(context)
    op.pre_execute(context)


def content_tag(image: str) -> str:
    return image_tag(image_content_digest(ROOT, image))


def ecr_repository_push(tag: str) -> str:
    """An image manifest put into moto's ECR as ``REPO:tag``; its digest."""
    layer = "sha256:" + "c" * 64
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 7, "digest": layer},
                "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 7,
                            "digest": layer}]}  # fmt: skip
    reply = boto3.client("ecr").put_image(repositoryName=REPO, imageManifest=json.dumps(manifest), imageTag=tag)
    return str(reply["image"]["imageId"]["imageDigest"])


# -- the mapping ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("profile", "image"), [
    ("llm-gpu.yaml", "ray-vllm-gpu"), ("llm-gpu-tp4.yaml", "ray-vllm-gpu"), ("llm-gpu-pp3-tp4.yaml", "ray-vllm-gpu"),
    ("translator-gpu.yaml", "ray-vllm-gpu"), ("llm-neuron.yaml", "ray-neuron"),
    ("llamacpp-graviton.yaml", "ray-llamacpp-arm64"), ("llm-cpu.yaml", "ray-vllm-cpu"),
    ("llamacpp-cpu.yaml", "ray-vllm-cpu"), ("translator-cpu.yaml", "ray-vllm-cpu"),
])  # fmt: skip
def test_every_profile_names_the_image_that_runs_it(profile: str, image: str) -> None:
    assert profile_image(profile, load_config(CONFIGS / profile)) == image


def test_the_images_exist_and_the_arm64_one_alone_is_on_an_arm64_base() -> None:
    assert sorted(CONFIGS.glob("*.yaml")), "the profiles"
    for cls, image in PROFILE_IMAGES.items():
        assert (ROOT / "images" / image / "Dockerfile").is_file(), image
        assert (image_platform(ROOT, image) == "linux/arm64") is (cls == "graviton"), image
    assert DEFAULT_IMAGE == "ray-vllm-gpu"  # what the target options meant before the image followed the profile


# -- the build and the deploy follow the profile ------------------------------------------------------------------
def test_graviton_builds_and_deploys_the_arm64_llamacpp_image(infra: Proxy) -> None:
    record, env, sent, ti, dag = run_check_and_build(infra, "eks", eks_options("graviton"))
    assert (record["serve_config"], record["image"]) == ("llamacpp-graviton.yaml", "ray-llamacpp-arm64")
    assert env["DOCKERFILE"] == "images/ray-llamacpp-arm64/Dockerfile"
    assert env["DOCKER_PLATFORM"] == "linux/arm64" and sent["projectName"] == "raylift-image-arm64"
    assert env["IMAGE_TAG"] == content_tag("ray-llamacpp-arm64")
    # the deploy step renders that image into the RayService (no explicit `image` option)
    with dag:
        deploy = deploy_op("eks", eks_options("graviton"), chosen_profile=dag.get_task("check_hardware_profile").output)
    start(deploy, ti)
    manifest = deploy.target_impl.render({"applications": [deploy.render()]}, workers=1)
    head = manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"].endswith(f"/{REPO}:{content_tag('ray-llamacpp-arm64')}")


def test_neuron_builds_the_neuron_image_on_the_x86_project(infra: Proxy) -> None:
    record, env, sent, _, _ = run_check_and_build(infra, "eks", eks_options("inferentia"))
    assert (record["serve_config"], record["image"]) == ("llm-neuron.yaml", "ray-neuron")
    assert env["DOCKERFILE"] == "images/ray-neuron/Dockerfile" and env["IMAGE_TAG"] == content_tag("ray-neuron")
    assert "DOCKER_PLATFORM" not in env and sent["projectName"] == "raylift-image"


def test_a_named_profile_picks_its_image_and_an_agreeing_image_name_is_kept(infra: Proxy) -> None:
    record, env, _, _, _ = run_check_and_build(infra, "eks", eks_options("gpu"), "llm-cpu.yaml")
    assert record["image"] == "ray-vllm-cpu" and env["DOCKERFILE"] == "images/ray-vllm-cpu/Dockerfile"
    record, env, _, _, _ = run_check_and_build(infra, "eks", eks_options("inferentia", image_name="ray-neuron"))
    assert record["image"] == "ray-neuron" and env["DOCKERFILE"] == "images/ray-neuron/Dockerfile"


def test_ecs_graviton_instances_build_the_arm64_image(infra: Proxy) -> None:
    ecs_cluster("ray", {"ray-head": 1, "ray-worker": 1})
    head, worker = container_instances(["c7g.8xlarge", "c7g.8xlarge"])
    service_tasks("ray-head", [head])
    service_tasks("ray-worker", [worker])
    options = {"cluster": "ray", "head_address": "10.0.0.1", "bucket": BUCKET, "ecr_repository": REPO}
    record, env, sent, ti, dag = run_check_and_build(infra, "ecs", options)
    assert (record["serve_config"], record["image"]) == ("llamacpp-graviton.yaml", "ray-llamacpp-arm64")
    assert env["DOCKERFILE"] == "images/ray-llamacpp-arm64/Dockerfile" and env["DOCKER_PLATFORM"] == "linux/arm64"
    assert sent["projectName"] == "raylift-image-arm64"
    # the scale step rolls out that image, by digest (CodeBuild pushed it under its content tag; moto's build does
    # not, so it is put there as the buildspec's push would)
    pushed = ecr_repository_push(content_tag("ray-llamacpp-arm64"))
    with dag:
        scale = ScaleClusterOperator(task_id="scale_cluster", target="ecs", target_options=options, workers=1,
                                     chosen_profile=dag.get_task("check_hardware_profile").output)
    start(scale, ti)
    assert scale.target_impl.image_reference().endswith(f"/{REPO}@{pushed}")


def test_ecs_with_no_instance_known_builds_the_default_and_the_deploy_refuses_a_profile_it_cannot_run(
    infra: Proxy,
) -> None:
    """An idle ECS cluster (the example's default) shows no instance before the scale step: ``auto`` cannot see the
    hardware, so the run builds image_name's image (default ray-vllm-gpu); once the instances are up, the deploy step
    refuses a profile that image cannot run, before anything is applied, and says what to set."""
    ecs_cluster("ray", {"ray-head": 0, "ray-worker": 0})
    options = {"cluster": "ray", "head_address": "10.0.0.1", "bucket": BUCKET, "ecr_repository": REPO}
    record, env, _, ti, dag = run_check_and_build(infra, "ecs", options)
    assert (record["instances"], record["image"]) == ([], "ray-vllm-gpu")
    assert env["DOCKERFILE"] == "images/ray-vllm-gpu/Dockerfile"
    head, worker = container_instances(["c7g.8xlarge", "c7g.8xlarge"])  # the scale step started Graviton instances
    service_tasks("ray-head", [head])
    service_tasks("ray-worker", [worker])
    with dag:
        deploy = deploy_op("ecs", options, chosen_profile=dag.get_task("check_hardware_profile").output)
    start(deploy, ti)
    with pytest.raises(ImageProfileError, match=r"This release built image 'ray-vllm-gpu' \(x86_64, vLLM on NVIDIA "
                       r"GPUs \(CUDA\)\) before ECS cluster 'ray' .*'s instances were known .* pick serve_config "
                       r"'llamacpp-graviton.yaml', a graviton profile, which runs on 'ray-llamacpp-arm64'\. Set the "
                       r"target option image_name to 'ray-llamacpp-arm64'"):
        deploy.render()


# -- the contradiction is refused before anything is built or applied ----------------------------------------------
@pytest.mark.parametrize(("nodegroup", "image_name", "message"), [
    ("graviton", "ray-vllm-gpu",
     r"Target option image_name 'ray-vllm-gpu' cannot run serve_config 'llamacpp-graviton.yaml' on EKS cluster 'ray' "
     r"\(node group 'graviton'\): it is for gpu profiles, and 'llamacpp-graviton.yaml' is a graviton profile, which "
     r"runs on 'ray-llamacpp-arm64' \(arm64, llama.cpp on Graviton CPUs\)\. Set image_name to 'ray-llamacpp-arm64', "
     r"or leave it out \(the image then follows the profile\), or name a serve_config that 'ray-vllm-gpu' runs\. "
     r"Nothing was built or applied\."),
    ("inferentia", "ray-vllm-gpu", r"'llm-neuron.yaml' is a neuron profile, which runs on 'ray-neuron'"),
    ("gpu", "ray-llamacpp-arm64", r"it is for graviton profiles, and 'llm-gpu.yaml' is a gpu profile"),
    ("gpu", "no-such-image", r"there is no images/no-such-image/Dockerfile \(raylift's images: ray-vllm-gpu, "),
])  # fmt: skip
def test_an_image_name_that_contradicts_the_profile_is_refused_first(
    infra: Proxy, nodegroup: str, image_name: str, message: str
) -> None:
    infra.bodies.clear()
    check = HardwareProfileOperator(task_id="check_hardware_profile", target="eks",
                                    target_options=eks_options(nodegroup, image_name=image_name))  # fmt: skip
    with pytest.raises(ImageProfileError, match=message) as refused:
        check.execute({"run_id": "manual__1", "ti": None})
    assert isinstance(refused.value, HardwareProfileError)  # what the profile refusals are
    sent = [target for target, _ in infra.bodies]
    assert not any(t.endswith(".StartBuild") or "PutObject" in t for t in sent), sent
    # the deploy step refuses it the same way, before anything is applied
    with pytest.raises(ImageProfileError, match=message):
        deploy_op("eks", eks_options(nodegroup, image_name=image_name)).render()


def test_an_image_of_your_own_is_held_to_the_profiles_architecture(tmp_path: Path) -> None:
    (tmp_path / "images/my-arm").mkdir(parents=True)
    (tmp_path / "images/my-arm/Dockerfile").write_text("FROM rayproject/ray:2.60.0-py311-aarch64\n")
    (tmp_path / "images/my-x86").mkdir(parents=True)
    (tmp_path / "images/my-x86/Dockerfile").write_text("FROM rayproject/ray:2.60.0-py311-gpu\n")
    graviton = load_config(CONFIGS / "llamacpp-graviton.yaml")
    assert choose_image("llamacpp-graviton.yaml", graviton, root=tmp_path, where="x", explicit="my-arm") == "my-arm"
    with pytest.raises(ImageProfileError, match=r"'my-x86' cannot run .*: its base image is x86_64, the profile's is "
                       r"arm64, .*which runs on 'ray-llamacpp-arm64'"):
        choose_image("llamacpp-graviton.yaml", graviton, root=tmp_path, where="x", explicit="my-x86")
    # no profile known yet (auto, no instance seen): image_name's, else the release's, else the default; no check
    assert choose_image("llm-cpu.yaml", {}, root=tmp_path, where="x", known=False) == DEFAULT_IMAGE
    assert choose_image("llm-cpu.yaml", {}, root=tmp_path, where="x", explicit="my-x86", known=False) == "my-x86"
