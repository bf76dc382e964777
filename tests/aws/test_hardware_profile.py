"""The Serve config's hardware profile follows the cluster's instances, and a named one the instances cannot run is
refused before anything is applied. The instances are moto's (EKS node groups, ECS container instances running the
services' tasks) and what each has is moto's copy of EC2's instance-type data (DescribeInstanceTypes): no table of
instance shapes is written here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

from raylift.hooks.ec2_instance_types import Ec2InstanceTypesHook
from raylift.operators.deploy import ServeDeployOperator
from raylift.serve.config import load_config
from raylift.serve.hardware import (
    HardwareProfileError,
    InstanceShape,
    check_profile,
    cluster_class,
    default_profile,
    profile_needs,
)
from tests.aws.moto_resources import ecs_cluster, eks_nodegroups
from tests.aws.standins import Proxy
from tests.fixtures.kube_api import KubeApiStandIn, kube_api  # noqa: F401 - fixture
from tests.targets.test_ecs import container_instances, service_tasks

CONFIGS = Path(__file__).resolve().parents[2] / "serve_apps" / "configs"
BUCKET = "raylift-models"
# the EKS example's node groups (terraform/modules/eks_ray/variables.tf), and two smaller ones
NODEGROUPS: dict[str, dict[str, Any]] = {
    "gpu": {"instanceTypes": ["g5.12xlarge"], "min": 0, "max": 4, "desired": 0},
    "graviton": {"instanceTypes": ["c7g.8xlarge", "c8g.8xlarge"], "min": 0, "max": 10, "desired": 0},
    "inferentia": {"instanceTypes": ["inf2.48xlarge"], "min": 0, "max": 1, "desired": 0},
    "small-gpu": {"instanceTypes": ["g5.2xlarge"], "min": 0, "max": 4, "desired": 0},
    "small-inf2": {"instanceTypes": ["inf2.xlarge"], "min": 0, "max": 4, "desired": 0},
    "x86": {"instanceTypes": ["m5.xlarge"], "min": 0, "max": 4, "desired": 0},
}


@pytest.fixture()
def infra(s3_proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Proxy:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    eks_nodegroups("ray", NODEGROUPS)
    return s3_proxy


def shapes(*types: str) -> tuple[InstanceShape, ...]:
    return Ec2InstanceTypesHook(aws_conn_id="aws_default").shapes(types)


def deploy_op(target: str, options: dict[str, Any], serve_config: str = "auto", **kwargs: Any) -> ServeDeployOperator:
    return ServeDeployOperator(
        task_id="deploy", target=target, target_options=options, serve_config=serve_config, served_name="m",
        artifact={"digest": "d", "working_dir": "s3://b/a.zip"},
        model={"model_id": "m", "revision": "r", "uri": "s3://b/m", "manifest_uri": "s3://b/m/m.json"},
        deferrable=False, **kwargs,
    )  # fmt: skip


def eks_op(nodegroup: str, serve_config: str = "auto") -> ServeDeployOperator:
    options = {"cluster_name": "ray", "worker_nodegroup": nodegroup, "kubernetes_conn_id": "kubernetes_default",
               "namespace": "raylift", "rayservice_name": "llm", "bucket": BUCKET, "image": "img:1"}  # fmt: skip
    return deploy_op("eks", options, serve_config)


def test_instance_shapes_come_from_ec2s_instance_type_data(infra: Proxy) -> None:
    g5, inf2, c7g, m5 = shapes("g5.12xlarge", "inf2.48xlarge", "c7g.8xlarge", "m5.xlarge")
    assert (g5.gpus, g5.gpu_name, g5.architectures) == (4, "A10G", ("x86_64",))
    assert (inf2.neuron_devices, inf2.neuron_cores, inf2.gpus) == (12, 24, 0)
    assert c7g.architectures == ("arm64",) and not c7g.gpus and not c7g.neuron_cores
    assert [cluster_class([s]) for s in (g5, inf2, c7g, m5)] == ["gpu", "neuron", "graviton", "cpu"]
    assert any(b"DescribeInstanceTypes" in body for _, body in infra.bodies)  # asked of EC2 (moto), over HTTP


@pytest.mark.parametrize(("nodegroup", "profile"), [
    ("gpu", "llm-gpu.yaml"), ("graviton", "llamacpp-graviton.yaml"), ("inferentia", "llm-neuron.yaml"),
    ("x86", "llm-cpu.yaml"),
])  # fmt: skip
def test_auto_follows_the_node_groups_instances(infra: Proxy, nodegroup: str, profile: str) -> None:
    name, base = eks_op(nodegroup).hardware_profile()
    assert name == profile
    assert base == load_config(CONFIGS / profile)


@pytest.mark.parametrize(("nodegroup", "profile", "message"), [
    ("small-gpu", "llm-gpu-tp4.yaml",
     r"'llm-gpu-tp4.yaml' cannot run on EKS cluster 'ray' \(node group 'small-gpu'\): it needs x86_64, 4 NVIDIA "
     r"GPU\(s\) on one instance, and g5.2xlarge \(x86_64, 8 vCPUs, 1 NVIDIA A10G GPU\(s\)\): a replica needs 4 NVIDIA "
     r"GPU\(s\) on one instance, it has 1\. Set serve_config to 'auto' \(picks 'llm-gpu.yaml'"),
    ("small-gpu", "llm-gpu-pp3-tp4.yaml", r"needs 4 NVIDIA GPU\(s\) on one instance, it has 1"),
    ("small-inf2", "llm-neuron.yaml",
     r"inf2.xlarge \(x86_64, 4 vCPUs, 1 Inferentia2 device\(s\) = 2 NeuronCores\): a replica needs 8 NeuronCores on "
     r"one instance, it has 2\. Name a profile these instances can run"),
    ("gpu", "llm-neuron.yaml", r"needs 8 NeuronCores on one instance, it has 0"),
    ("graviton", "llm-cpu.yaml",
     r"c7g.8xlarge \(arm64, 32 vCPUs, no GPU or Neuron device\): its image is x86_64, the instance runs arm64; "
     r"c8g.8xlarge .*Set serve_config to 'auto' \(picks 'llamacpp-graviton.yaml'"),
    ("graviton", "llm-gpu.yaml", r"its image is x86_64, the instance runs arm64"),
    ("x86", "llamacpp-graviton.yaml", r"its image is arm64, the instance runs x86_64.*picks 'llm-cpu.yaml'"),
    ("x86", "translator-gpu.yaml", r"needs 1 NVIDIA GPU\(s\) on one instance, it has 0"),
])  # fmt: skip
def test_a_named_profile_the_instances_cannot_run_is_refused(
    infra: Proxy, nodegroup: str, profile: str, message: str
) -> None:
    with pytest.raises(HardwareProfileError, match=message):
        eks_op(nodegroup, profile).hardware_profile()


def test_a_named_profile_that_fits_is_kept_and_a_cpu_one_on_gpus_is_a_warning(infra: Proxy) -> None:
    assert eks_op("gpu", "llm-gpu-tp4.yaml").hardware_profile()[0] == "llm-gpu-tp4.yaml"
    assert eks_op("inferentia", "llm-neuron.yaml").hardware_profile()[0] == "llm-neuron.yaml"
    assert eks_op("graviton", "llamacpp-graviton.yaml").hardware_profile()[0] == "llamacpp-graviton.yaml"
    assert eks_op("x86", "llm-cpu.yaml").hardware_profile()[0] == "llm-cpu.yaml"
    # backwards compatible: an explicit llm-cpu.yaml still means that profile, with a warning on GPU instances
    assert eks_op("gpu", "llm-cpu.yaml").hardware_profile()[0] == "llm-cpu.yaml"
    warnings = check_profile("llm-cpu.yaml", load_config(CONFIGS / "llm-cpu.yaml"), shapes("g5.12xlarge"), where="eks")
    assert warnings == ["serve_config 'llm-cpu.yaml' runs on CPU only, but eks has g5.12xlarge (x86_64, 48 vCPUs, 4 "
                        "NVIDIA A10G GPU(s)): the accelerator stays idle. Set serve_config to 'auto' ('llm-gpu.yaml') "
                        "to use it."]


def test_the_refusal_comes_before_anything_is_applied(infra: Proxy, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    infra.bodies.clear()
    with pytest.raises(HardwareProfileError):
        eks_op("small-gpu", "llm-gpu-tp4.yaml").execute({"run_id": "manual__1", "ti": None})
    assert kube_api.stored("raylift", "llm") is None
    sent = [path for path, _ in infra.bodies]
    assert all("update-config" not in p for p in sent) and not any("PutObject" in p for p in sent)


def test_profile_needs_are_read_off_the_serve_configs() -> None:
    needs = {p.name: profile_needs(p.name, load_config(p)) for p in sorted(CONFIGS.glob("*.yaml"))}
    assert (needs["llm-gpu-tp4.yaml"].gpus, needs["llm-gpu-pp3-tp4.yaml"].gpus, needs["llm-gpu.yaml"].gpus) == (4, 4, 1)
    assert needs["translator-gpu.yaml"].gpus == 1  # num_gpus 0.5: one GPU on the instance
    assert needs["llm-neuron.yaml"].neuron_cores == 8
    assert needs["llamacpp-graviton.yaml"].architecture == "arm64"
    assert not needs["llm-cpu.yaml"].accelerated and needs["llm-cpu.yaml"].architecture == "x86_64"


def test_no_instance_known_keeps_the_cpu_profile_and_checks_nothing() -> None:
    assert default_profile(()) == "llm-cpu.yaml"
    assert check_profile("llm-gpu-tp4.yaml", load_config(CONFIGS / "llm-gpu-tp4.yaml"), (), where="x") == []


def test_ecs_follows_the_instances_running_its_services(infra: Proxy) -> None:
    """ECS: the EC2 instances that run the head and worker services' tasks (the ECS example: g5.12xlarge)."""
    ecs_cluster("ray", {"ray-head": 1, "ray-worker": 2})
    options = {"cluster": "ray", "head_address": "10.0.0.1", "bucket": BUCKET, "ecr_repository": "ray-vllm"}
    assert deploy_op("ecs", options).hardware_profile()[0] == "llm-cpu.yaml"  # no task runs: unknown, CPU as before
    head, worker_a, worker_b = container_instances(["g5.12xlarge"] * 3)
    service_tasks("ray-head", [head])
    service_tasks("ray-worker", [worker_a, worker_b])
    assert deploy_op("ecs", options).hardware_profile()[0] == "llm-gpu.yaml"
    with pytest.raises(HardwareProfileError, match=r"ECS cluster 'ray' \(services ray-head, ray-worker\): .*"
                       r"g5.12xlarge \(x86_64, 48 vCPUs, 4 NVIDIA A10G GPU\(s\)\): a replica needs 8 NeuronCores"):
        deploy_op("ecs", options, "llm-neuron.yaml").hardware_profile()
    assert json.dumps(deploy_op("ecs", options, "llm-gpu-pp3-tp4.yaml").hardware_profile()[1])


# -- the run's first step: refused before the image build, the staging, the lease and the scale ----------------
DAG_WIRING = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder=sys.argv[1]).dags["raylift_deploy"]
task = dag.get_task("check_hardware_profile")
print(json.dumps({"upstream": sorted(task.get_flat_relative_ids(upstream=True)),
                  "downstream": sorted(task.get_flat_relative_ids(upstream=False)),
                  "rules": {t.task_id: t.trigger_rule.value for t in dag.tasks}}))
"""


def test_the_profile_is_checked_first_and_everything_that_applies_waits_for_it(tmp_path: Path) -> None:
    """Airflow's own DagBag parse of raylift_deploy: the check has nothing upstream, and the build, the staging, the
    lease, the scale and the deploy are downstream of it with all_success, so a refusal stops them (seen failing
    with the check wired after scale_cluster)."""
    import os
    import subprocess
    import sys

    repo = CONFIGS.parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo / "plugins"), str(repo)]),
           "AIRFLOW_HOME": str(tmp_path), "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}  # fmt: skip
    out = subprocess.run([sys.executable, "-c", DAG_WIRING, str(repo / "dags")], env=env, capture_output=True,
                         text=True, timeout=300, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    wiring = json.loads(out.stdout.strip().splitlines()[-1])
    assert wiring["upstream"] == []
    applying = ["build_artifact", "stage_model", "acquire_cluster_lease", "scale_cluster", "deploy"]
    assert set(applying) <= set(wiring["downstream"]), wiring["downstream"]
    assert {wiring["rules"][t] for t in applying} == {"all_success"}, wiring["rules"]


def test_the_check_step_refuses_what_the_node_group_cannot_run_and_applies_nothing(
    infra: Proxy, kube_api: KubeApiStandIn  # noqa: F811
) -> None:
    from raylift.operators.profile import HardwareProfileOperator

    options = {"cluster_name": "ray", "worker_nodegroup": "small-gpu", "kubernetes_conn_id": "kubernetes_default",
               "namespace": "raylift", "rayservice_name": "llm", "bucket": BUCKET, "image": "img:1"}  # fmt: skip
    infra.bodies.clear()
    check = HardwareProfileOperator(task_id="check_hardware_profile", target="eks", target_options=options,
                                    serve_config="llm-gpu-tp4.yaml")  # fmt: skip
    with pytest.raises(HardwareProfileError, match=r"needs 4 NVIDIA GPU\(s\) on one instance, it has 1"):
        check.execute({"run_id": "manual__1", "ti": None})
    sent = [path for path, _ in infra.bodies]
    assert sent and all("update-config" not in p for p in sent) and not any("PutObject" in p for p in sent), sent
    assert kube_api.stored("raylift", "llm") is None
    auto = HardwareProfileOperator(task_id="check_hardware_profile", target="eks",
                                   target_options={**options, "worker_nodegroup": "gpu"})  # fmt: skip
    assert auto.execute({"run_id": "manual__1", "ti": None}) == {
        "serve_config": "llm-gpu.yaml", "cluster": "EKS cluster 'ray' (node group 'gpu')", "instances": ["g5.12xlarge"],
        "image": "ray-vllm-gpu"}  # the image that runs the profile (tests/aws/test_profile_images.py)
