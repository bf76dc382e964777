"""EksTarget: node groups in moto, the RayService through the Kubernetes API stand-in on 127.0.0.1."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import boto3
import pytest
import yaml

from raylift.errors import ClusterError, DeployError, RayliftValueError
from raylift.targets import get_target
from raylift.targets.eks import EksTarget
from tests.aws.moto_resources import eks_nodegroups, tool_target_options
from tests.fixtures.kube_api import KubeApiStandIn, kube_api  # noqa: F401 - fixture
from tests.kuberay.serve_configs import serve_config

BUCKET = "raylift-models"
NEW_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm:def"


@pytest.fixture()
def infra(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})


def target(**extra: object) -> EksTarget:
    options = {
        "cluster_name": "ray",
        "worker_nodegroup": "gpu",
        "kubernetes_conn_id": "kubernetes_default",
        "namespace": "raylift",
        "rayservice_name": "llm",
        "bucket": BUCKET,
        "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm:abc",
        "hf_home": "/mnt/models",
    } | extra
    t = get_target("eks", **json.loads(json.dumps(options)))
    assert isinstance(t, EksTarget)
    return t


def nodegroup(max_size: int = 4, desired: int = 0) -> None:
    # g5.2xlarge: one A10G, an instance type the gpu-vllm profile's pods may land on.
    eks_nodegroups("ray", {"gpu": {"instanceTypes": ["g5.2xlarge"], "min": 0, "max": max_size, "desired": desired}})


def scaling_of(group: str) -> dict:
    return boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName=group)["nodegroup"]["scalingConfig"]


def scaling() -> dict:
    return scaling_of("gpu")


def test_unknown_option_is_refused() -> None:
    with pytest.raises(RayliftValueError, match=r"\['nodes'\] are not options of the eks target: use bucket, "):
        EksTarget(cluster_name="c", worker_nodegroup="g", bucket="b", nodes=3)


def test_scale_sizes_the_node_group_for_the_profile(infra: None) -> None:
    nodegroup()
    t = target()
    want = t.scale(workers=3)
    assert scaling()["desiredSize"] == 3  # one GPU per worker pod, one GPU per g5.2xlarge
    assert (want.nodes, want.resources) == (3, {"GPU": 3.0})
    state = t.cluster_state()
    assert state.missing(want) == []
    assert t.recorded_workers() == 3


@pytest.mark.parametrize("per_node", [24, None])
def test_neuron_capacity_is_reported_in_rays_neuron_cores(infra: None, per_node: int | None) -> None:
    """The inf2 pods ask for NeuronCores (aws.amazon.com/neuroncore, which KubeRay maps to Ray's neuron_cores); a node
    holds 24 of them, from the option or from EC2's data (12 Inferentia2 devices x 2 cores)."""
    eks_nodegroups("ray", {"inferentia": {"instanceTypes": ["inf2.48xlarge"], "min": 0, "max": 2, "desired": 0}})
    extra = {} if per_node is None else {"accelerators_per_node": per_node}
    t = target(worker_nodegroup="inferentia", profile="inf2", **extra)
    want = t.scale(workers=3)  # three TP=8 pods (4 devices each) fill one inf2.48xlarge
    assert scaling_of("inferentia")["desiredSize"] == 1
    assert (want.nodes, want.resources) == (1, {"neuron_cores": 24.0})
    state = t.cluster_state()
    assert state.resources == {"neuron_cores": 24.0, "CPU": 180.0}  # three pods of 60 CPUs and 8 NeuronCores
    assert state.node_resources == [{"CPU": 60.0, "neuron_cores": 8.0}] * 3


def test_deploy_then_upgrade_scales_for_the_peak_and_rolls_back(infra: None, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    nodegroup(max_size=4)
    t = target()
    t.scale(workers=2)
    t.apply_serve_config(serve_config(model="first"))
    assert scaling()["desiredSize"] == 2  # first deploy: no old cluster beside it
    first = kube_api.stored("raylift", "llm")
    assert first["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["replicas"] == 2
    assert t.current_serve_config()["applications"][0]["args"]["model_id"] == "first"

    t.apply_serve_config(serve_config(model="second"))
    assert scaling()["desiredSize"] == 2  # serveConfigV2 only: KubeRay updates the running cluster in place
    target(image=NEW_IMAGE).apply_serve_config(serve_config(model="third"))
    assert scaling()["desiredSize"] == 4  # a new image: NewCluster runs old + new side by side = 2 x 2 GPUs
    assert t.current_serve_config()["applications"][0]["args"]["model_id"] == "third"

    t.rollback()
    again = kube_api.stored("raylift", "llm")
    assert yaml.safe_load(again["spec"]["serveConfigV2"])["applications"][0]["args"]["model_id"] == "second"
    assert again["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] != NEW_IMAGE


def test_upgrade_refused_with_the_numbers(infra: None, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    nodegroup(max_size=3)
    t = target()
    t.scale(workers=2)
    t.apply_serve_config(serve_config(model="first"))
    t.apply_serve_config(serve_config(model="second"))  # serveConfigV2 only: in place, fits
    with pytest.raises(ClusterError, match=r"NewCluster upgrade of 2 worker\(s\) needs 4 nvidia.com/gpu = 4 node\(s\).*at most 3"):
        target(image=NEW_IMAGE).apply_serve_config(serve_config(model="third"))
    assert "second" in kube_api.stored("raylift", "llm")["spec"]["serveConfigV2"]  # nothing applied
    in_place = target(upgrade_strategy="None", image=NEW_IMAGE)
    in_place.apply_serve_config(serve_config(model="third"))
    assert scaling()["desiredSize"] == 2


def test_rollback_without_history_is_a_deploy_error(infra: None, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    with pytest.raises(DeployError, match="nothing to roll back to"):
        target().rollback()


def test_deploy_trigger_and_endpoint(infra: None) -> None:
    nodegroup()
    path, kwargs = target().deploy_trigger(app_names=["llm"], timeout_s=600).serialize()
    assert path == "raylift.triggers.rayservice.RayServiceReadyTrigger"
    assert (kwargs["name"], kwargs["namespace"], kwargs["app_names"]) == ("llm", "raylift", ["llm"])
    assert kwargs["cluster_context"] is None
    _, kwargs = target(kubernetes_conn_id=None).deploy_trigger(app_names=["llm"], timeout_s=600).serialize()
    assert kwargs["cluster_context"] == {"eks_cluster_name": "ray", "region": "us-west-2", "aws_conn_id": "aws_default"}
    assert target().endpoint_url() == "http://llm-serve-svc.raylift.svc.cluster.local:8000"


def test_teardown_deletes_the_rayservice_and_empties_the_node_group(infra: None, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    nodegroup()
    t = target()
    t.scale(workers=1)
    t.apply_serve_config(serve_config())
    t.teardown()
    assert kube_api.stored("raylift", "llm") is None
    assert scaling()["desiredSize"] == 0
    t.teardown()  # idempotent


def test_the_stacks_outputs_through_the_tool_pick_the_node_group(infra: None, kube_api: KubeApiStandIn) -> None:  # noqa: F811
    """``raylift_target_options`` as tools/tf_outputs_to_airflow.py prints it works as is; its --nodegroup picks
    the group out of the stack's node groups (the default: profile gpu-vllm's)."""
    outputs = {
        "raylift_target": "eks", "region": "us-west-2", "model_store_uri": f"s3://{BUCKET}/models",
        "ecr_repository_url": "123456789012.dkr.ecr.us-west-2.amazonaws.com/raylift-ray-vllm",
        "codebuild_project": "raylift-ray-vllm", "eks_cluster": "ray",
        "eks_nodegroups": {"gpu": "gpu", "graviton": "arm", "inferentia": "inf"},
        "eks_namespace": "raylift", "eks_service_account": "ray",
    }  # fmt: skip
    options, _ = tool_target_options(outputs)
    nodegroup()
    extra = {"kubernetes_conn_id": "kubernetes_default", "rayservice_name": "llm", "image": "img:1"}
    t = get_target("eks", **(options | extra))
    assert isinstance(t, EksTarget)
    assert (t.cluster_name, t.worker_nodegroup, t.aws.ecr_repository) == ("ray", "gpu", "raylift-ray-vllm")
    inf2, _ = tool_target_options(outputs, nodegroup="inferentia")
    assert get_target("eks", **(inf2 | extra | {"profile": "inf2"})).worker_nodegroup == "inf"
    t.scale(workers=1)
    t.apply_serve_config(serve_config())
    pod_specs = [kube_api.stored("raylift", "llm")["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]]
    pod_specs += [g["template"]["spec"] for g in kube_api.stored("raylift", "llm")["spec"]["rayClusterConfig"]["workerGroupSpecs"]]
    assert {s["serviceAccountName"] for s in pod_specs} == {"ray"}  # Pod Identity: the pods may read the bucket
    with pytest.raises(RayliftValueError, match="needs target_options.cluster_name"):
        EksTarget(worker_nodegroup="g", bucket="b")


def test_billed_nodes_are_each_node_groups_desired_size_under_its_instance_type(infra: None) -> None:
    groups = {
        "gpu": {"instanceTypes": ["g5.12xlarge"], "min": 0, "max": 4, "desired": 2},
        "head": {"instanceTypes": ["m5.xlarge"], "min": 0, "max": 1, "desired": 1},
    }
    eks_nodegroups("ray", groups)
    t = target(head_nodegroup="head")
    assert t.billed_nodes() == {g["instanceTypes"][0]: g["desired"] for g in groups.values()}
    assert target().billed_nodes() == {"g5.12xlarge": groups["gpu"]["desired"]}  # no head group: workers only
    t.scale(workers=0)
    assert (scaling_of("gpu")["desiredSize"], scaling_of("head")["desiredSize"]) == (0, 1)
    assert t.billed_nodes() == {"m5.xlarge": 1}  # an empty node group bills nothing


def test_a_node_group_of_several_instance_types_is_priced_as_its_first(
    infra: None, caplog: pytest.LogCaptureFixture
) -> None:
    """For On-Demand capacity EKS launches a group's instance types in the order given; the cost says it guessed."""
    eks_nodegroups("ray", {"gpu": {"instanceTypes": ["g6.xlarge", "g5.xlarge"], "min": 0, "max": 4, "desired": 3}})
    # on the module's logger itself: Airflow's logging setup (when a hook first connects) replaces the root
    # handlers that caplog relies on
    logging.getLogger("raylift.targets.eks").addHandler(caplog.handler)
    try:
        billed = target().billed_nodes()
    finally:
        logging.getLogger("raylift.targets.eks").removeHandler(caplog.handler)
    assert billed == {"g6.xlarge": 3}
    assert "lists instance types ['g6.xlarge', 'g5.xlarge']: its 3 node(s) are priced as g6.xlarge" in caplog.text


def test_a_spec_changed_between_read_and_write_is_kept_and_a_status_write_is_not_a_conflict(
    infra: None, kube_api: KubeApiStandIn, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """Another writer's apply right after raylift read the RayService: a conflict, their spec stays. KubeRay
    writing the status in between (a newer resourceVersion, the same spec) is not one: the apply goes through."""
    from raylift.hooks.kuberay import KubeRayHook, RayServiceConflictError

    nodegroup(max_size=4)
    t = target(upgrade_strategy="None")
    t.scale(workers=1)
    t.apply_serve_config(serve_config(model="first"))
    real_get = KubeRayHook.get_rayservice
    between: list[str] = []

    def get_then_someone_writes(self: KubeRayHook, name: str, namespace: str) -> dict | None:
        obj = real_get(self, name, namespace)
        if between:
            what = between.pop()
            if what == "status":
                kube_api.write_status(namespace, name, {"serviceStatus": "Running", "observedGeneration": 9})
            else:
                KubeRayHook().apply_rayservice(t.render(serve_config(model="by-hand"), 1))
        return obj

    monkeypatch.setattr(KubeRayHook, "get_rayservice", get_then_someone_writes)
    between.append("status")
    t.apply_serve_config(serve_config(model="second"))
    assert t.current_serve_config()["applications"][0]["args"]["model_id"] == "second"
    between.append("spec")
    with pytest.raises(RayServiceConflictError, match="changed since raylift read it"):
        t.apply_serve_config(serve_config(model="third"))
    assert t.current_serve_config()["applications"][0]["args"]["model_id"] == "by-hand"


def test_cluster_state_lists_each_ray_pod_so_a_tp_group_must_fit_one_pod(infra: None) -> None:
    """gpu-vllm pods have one GPU each, though a g5.12xlarge has 4: Ray sees one node per pod, so TP 4 can never be
    placed there. The state lists the pods as Ray will see them and the fit check refuses TP 4 by its numbers."""
    from raylift.errors import ServeFitError
    from raylift.serve.config import load_config, render_app
    from raylift.serve.validation import Cluster, check_fit

    eks_nodegroups("ray", {"gpu": {"instanceTypes": ["g5.12xlarge"], "min": 0, "max": 4, "desired": 0}})
    t = target()
    t.scale(workers=4)  # four one-GPU pods on one 4-GPU node
    state = t.cluster_state()
    assert state.resources == {"GPU": 4.0, "CPU": 12.0} and state.node_resources == [{"CPU": 3.0, "GPU": 1.0}] * 4
    base = load_config(Path(__file__).resolve().parents[2] / "serve_apps/configs/llm-gpu-tp4.yaml")
    app = render_app(base, app_name="llm", working_dir="s3://b/a.zip", args={}, replicas=1)
    with pytest.raises(ServeFitError, match=r"tensor_parallel_size 4 must fit within one node .* largest node has 1 GPU"):
        check_fit(app, Cluster(totals=state.resources, nodes=tuple(state.node_resources)), vllm=True)


def test_cluster_state_of_a_cpu_profile_lists_its_pods_cpus(infra: None) -> None:
    """Graviton pods (30 CPUs each, one a c7g.8xlarge): a third 30-CPU llama.cpp replica on two pods is refused by
    the fit check, as Ray would leave it pending (the state used to report nothing for CPU profiles)."""
    from raylift.errors import ServeFitError
    from raylift.serve.config import load_config, render_app
    from raylift.serve.validation import Cluster, check_fit

    eks_nodegroups("ray", {"graviton": {"instanceTypes": ["c7g.8xlarge"], "min": 0, "max": 10, "desired": 2}})
    state = target(worker_nodegroup="graviton", profile="graviton").cluster_state()
    assert state.node_resources == [{"CPU": 30.0}] * 2 and state.resources == {"CPU": 60.0}
    base = load_config(Path(__file__).resolve().parents[2] / "serve_apps/configs/llamacpp-graviton.yaml")
    app = render_app(base, app_name="llm", working_dir="s3://b/a.zip", args={}, replicas=3)
    with pytest.raises(ServeFitError, match=r"CPU: needs 90 .* cluster has 60"):
        check_fit(app, Cluster(totals=state.resources, nodes=tuple(state.node_resources)))
