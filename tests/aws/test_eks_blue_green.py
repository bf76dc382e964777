"""A blue/green release on EKS (``raylift.targets.eks_blue_green``): the node group, its Auto Scaling group and EC2
instances in moto; the RayService, its RayClusters and Ray pods in the Kubernetes API stand-in (every apply checked
against KubeRay's CRD, strict), with KubeRay's Gateway and the HTTPRoutes (``tests.kuberay.gateway_api``); KubeRay
itself played by ``tests.kuberay.kuberay_model`` (its v1.7.0 RayService controller, ported: the candidate grows only
once its Gateway is Accepted and Programmed), Envoy Gateway by ``EnvoyGateway`` (an address only from the internal
NLB terraform's EnvoyProxy asks for), reconciling between raylift's steps as the operators would."""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import Any

import boto3
import pytest

from raylift.errors import ClusterError, RayliftValueError
from raylift.kuberay.manifest import to_apply_config
from raylift.kuberay.upgrade import HOLD_OPTIONS
from raylift.release.blue_green import (
    REMOVED,
    RETIRED,
    STARTED,
    arms,
    promote_blue_green,
    start_blue_green,
    undo_blue_green,
)
from raylift.release.rollback import undo_release
from raylift.release.state import DeploymentState
from raylift.serve.config import app_by_name, app_url
from raylift.store import LocalStore
from raylift.targets import get_target
from raylift.targets.eks import EksTarget
from raylift.triggers.rayservice import RayServiceUpgradeTrigger
from tests.aws.moto_resources import eks_nodegroups
from tests.fixtures.kuberay_crd import validate
from tests.kuberay.gateway_api import EnvoyGateway, KubeGatewayStandIn, kube_gateway  # noqa: F401 - fixture
from tests.kuberay.kuberay_model import KubeRayModel
from tests.kuberay.serve_configs import serve_config

NS, SERVICE, BUCKET = "raylift", "llm", "raylift-state"
IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm:abc"
NEW_IMAGE = IMAGE.replace(":abc", ":def")
NLB = "k8s-envoyga-envoyray-0a1b2c3d4e-0123456789abcdef.elb.us-west-2.amazonaws.com"  # internal: VPC-resolvable


def target(**extra: Any) -> EksTarget:
    """A fresh target, as each Airflow task builds its own (one GPU per g5.2xlarge node)."""
    options = {"cluster_name": "ray", "worker_nodegroup": "gpu", "kubernetes_conn_id": "kubernetes_default",
               "namespace": NS, "rayservice_name": SERVICE, "bucket": BUCKET, "image": IMAGE,
               "accelerators_per_node": 1, "gateway_class": "eg", "poll_interval_s": 0.05} | extra  # fmt: skip
    t = get_target("eks", **json.loads(json.dumps(options)))
    assert isinstance(t, EksTarget)
    return t


def asg_name() -> str:
    ng = boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="gpu")["nodegroup"]
    return str(ng["resources"]["autoScalingGroups"][0]["name"])


def hosts() -> dict[str, str]:
    """The node group's in-service instances: private IP -> instance id."""
    group = boto3.client("autoscaling").describe_auto_scaling_groups(AutoScalingGroupNames=[asg_name()])[
        "AutoScalingGroups"][0]
    ids = [i["InstanceId"] for i in group["Instances"] if i["LifecycleState"] == "InService"]
    found = boto3.client("ec2").describe_instances(InstanceIds=ids)["Reservations"] if ids else []
    return {i["PrivateIpAddress"]: i["InstanceId"] for r in found for i in r["Instances"]}


def eks_follows_the_node_group() -> None:
    """What EKS does after UpdateNodegroupConfig (moto's EKS does not): its Auto Scaling group takes the size."""
    desired = boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="gpu")["nodegroup"][
        "scalingConfig"]["desiredSize"]
    boto3.client("autoscaling").set_desired_capacity(AutoScalingGroupName=asg_name(), DesiredCapacity=desired)


def desired_size() -> int:
    return int(boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="gpu")["nodegroup"][
        "scalingConfig"]["desiredSize"])


@pytest.fixture()
def serving(aws: str, kube_gateway: KubeGatewayStandIn, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
            request: pytest.FixtureRequest) -> KubeRayModel:
    """Two workers serving model "first" from cluster llm-00001 on two g5.2xlarge of node group gpu (maxSize 4),
    released as any deploy is (scale, then apply) with KubeRay's default NewCluster upgrade strategy. Envoy Gateway
    runs for GatewayClass "eg" and its Service gets the internal NLB (``load_balancer`` param: None, no address);
    it acts in raylift's pauses too (``EksTarget._sleep``)."""
    kube_rayclusters = kube_gateway
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": s3.meta.region_name})
    eks_nodegroups("ray", {"gpu": {"instanceTypes": ["g5.2xlarge"], "min": 0, "max": 4, "desired": 2}})
    ng = boto3.client("eks").describe_nodegroup(clusterName="ray", nodegroupName="gpu")["nodegroup"]
    boto3.client("ec2").create_launch_template(
        LaunchTemplateName="gpu", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.2xlarge"})
    boto3.client("autoscaling").create_auto_scaling_group(
        AutoScalingGroupName=asg_name(), MinSize=0, MaxSize=4, DesiredCapacity=2,
        LaunchTemplate={"LaunchTemplateName": "gpu"}, VPCZoneIdentifier=ng["subnets"][0])
    model = KubeRayModel(kube_rayclusters, NS, SERVICE, lambda: sorted(hosts()))
    model.envoy = EnvoyGateway(kube_rayclusters, load_balancer=getattr(request, "param", NLB),
                               services=lambda ns: model.serve_services())
    envoy = model.envoy
    monkeypatch.setattr(EksTarget, "_sleep", lambda self, seconds: envoy.reconcile())
    t = target()
    t.scale(workers=2)
    t.apply_serve_config(serve_config(model="first"))
    model.reconcile_times(3)
    assert (model.active(), model.pending(), model.serve_service) == ("llm-00001", "", "llm-00001")
    return model


def stored(model: KubeRayModel) -> dict[str, Any]:
    obj = model.kube.stored(NS, SERVICE)
    assert obj is not None
    return obj


def round_trip(trigger: Any) -> Any:
    """The trigger as the triggerer rebuilds it from ``serialize()``."""
    path, kwargs = trigger.serialize()
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))


def held_release(model: KubeRayModel) -> tuple[EksTarget, str]:
    """hold_candidate of a new image (a new rayClusterConfig: KubeRay starts a second cluster), EKS launching the
    nodes, KubeRay reconciling until the candidate is held; returns the target and the candidate's name."""
    t = target(image=NEW_IMAGE)
    assert t.hold_candidate(serve_config(model="first")) == "llm-00001"
    spec = stored(model)["spec"]
    validate(to_apply_config(stored(model)))  # what the stand-in took is valid under KubeRay's CRD
    assert spec["upgradeStrategy"] == {"type": "NewClusterWithIncrementalUpgrade", "clusterUpgradeOptions": {
        "gatewayClassName": "eg", "stepSizePercent": 0, "maxSurgePercent": 100, "intervalSeconds": 60}}
    assert desired_size() == 4  # room for a second whole cluster beside the first
    eks_follows_the_node_group()
    model.reconcile_times(6)
    candidate = model.pending()
    assert candidate == "llm-00002"
    event = round_trip(t.candidate_trigger(app_names=["llm"], timeout_s=5)).wait()
    assert event["status"] == "success" and event["candidate"] == candidate, event
    return t, candidate


def test_the_pending_cluster_is_held_beside_the_active_one_until_promote_then_the_nodes_go_back(
        serving: KubeRayModel) -> None:
    model = serving
    t, candidate = held_release(model)
    url = t.eks_candidate_endpoint()
    assert url == f"http://{NLB}:80/raylift-arm/{candidate}" and "svc.cluster.local" not in url
    assert model.envoy is not None
    assert model.envoy.route(f"{url}/llm/v1/models") == (f"{candidate}-serve-svc", "/llm/v1/models")
    assert model.envoy.route(f"http://{NLB}/llm/v1/models") == ("llm-00001-serve-svc", "/llm/v1/models")  # users
    model.reconcile_times(20)  # however long the gate takes: KubeRay never switches under the hold
    status = model.status()
    assert (model.active(), model.pending(), model.serve_service) == ("llm-00001", candidate, "llm-00001")
    assert status["pendingServiceStatus"]["targetCapacity"] == 100  # measured at full size ...
    assert status["pendingServiceStatus"]["trafficRoutedPercent"] == 0  # ... with none of the users' traffic
    assert status["activeServiceStatus"]["targetCapacity"] == 100
    promoted = round_trip(t.promotion_trigger(candidate, timeout_s=5))
    assert promoted.evaluate(promoted.poll()) is None

    assert target(image=NEW_IMAGE).promote_candidate() == candidate
    assert stored(model)["spec"]["upgradeStrategy"] == {"type": "NewCluster"}
    model.reconcile()
    assert (model.active(), model.pending(), model.serve_service) == (candidate, "", candidate)
    event = promoted.wait()
    assert event["status"] == "success", event
    with pytest.raises(ClusterError, match="no pending cluster"):
        t.eks_candidate_endpoint()

    old = {p["status"]["hostIP"]: hosts()[p["status"]["hostIP"]] for p in model.kube.ray_pods[(NS, "llm-00001")]
           if p["status"]["hostIP"] in hosts()}
    new = {p["status"]["hostIP"] for p in model.kube.ray_pods[(NS, candidate)] if p["status"]["hostIP"] in hosts()}
    assert len(old) == len(new) == 2 and not set(old) & new
    with pytest.raises(ClusterError, match=r"only 0 run no Ray pod .* still do"):
        target(image=NEW_IMAGE).restore_node_groups()  # the old cluster is not deleted yet: nothing terminated
    assert desired_size() == 4 and len(hosts()) == 4
    model.reconcile()  # KubeRay deletes the old cluster (after rayClusterDeletionDelaySeconds)
    assert model.deleted == ["llm-00001"]
    terminated = target(image=NEW_IMAGE).restore_node_groups()
    assert sorted(terminated) == sorted(old.values())  # exactly the old cluster's nodes
    assert desired_size() == 2 and set(hosts()) == new
    assert target(image=NEW_IMAGE).restore_node_groups() == []  # nothing recorded any more


def test_a_rejected_candidate_is_removed_and_the_active_cluster_is_left_as_it_was(serving: KubeRayModel) -> None:
    model = serving
    spec_before = stored(model)["spec"]
    cluster_before = model.kube.rayclusters[(NS, "llm-00001")]
    pods_before = model.kube.ray_pods[(NS, "llm-00001")]
    t, candidate = held_release(model)

    assert t.remove_candidate() == candidate
    spec = stored(model)["spec"]
    assert {k: v for k, v in spec.items() if k != "upgradeStrategy"} == {
        k: v for k, v in spec_before.items() if k != "upgradeStrategy"}
    removed = round_trip(t.removal_trigger(candidate, timeout_s=5))
    for _ in range(6):
        model.reconcile()
        assert (model.active(), model.serve_service) == ("llm-00001", "llm-00001")  # users never left it
    assert model.pending() == "" and candidate in model.deleted
    assert removed.wait()["status"] == "success"
    assert model.kube.rayclusters[(NS, "llm-00001")] == cluster_before
    assert model.kube.ray_pods[(NS, "llm-00001")] == pods_before

    serving_hosts = {p["status"]["hostIP"] for p in pods_before}
    terminated = target().restore_node_groups()
    assert len(terminated) == 2 and desired_size() == 2
    assert serving_hosts - {"10.0.200.10"} <= set(hosts())  # the active cluster's nodes stay
    assert stored(model)["spec"] == spec_before  # the configured strategy is back; nothing else differs
    model.reconcile_times(3)
    assert (model.active(), model.pending(), model.created) == ("llm-00001", "", ["llm-00001", candidate])


def test_without_the_hold_kuberay_switches_as_soon_as_the_new_cluster_is_ready(serving: KubeRayModel) -> None:
    """The model's control: KubeRay's plain NewCluster upgrade switches unasked, which is why raylift holds."""
    model = serving
    target(image=NEW_IMAGE).apply_serve_config(serve_config(model="first"))
    eks_follows_the_node_group()
    model.reconcile_times(3)
    assert (model.active(), model.serve_service) == ("llm-00002", "llm-00002")


def test_a_hold_without_a_gateway_class_is_refused_before_anything_changes(serving: KubeRayModel) -> None:
    model = serving
    spec = stored(model)["spec"]
    with pytest.raises(RayliftValueError, match="needs the eks target option 'gateway_class'"):
        target(image=NEW_IMAGE, gateway_class=None).hold_candidate(serve_config(model="first"))
    with pytest.raises(ClusterError, match="does not replace its Ray cluster"):
        target().hold_candidate(serve_config(model="second"))
    assert stored(model)["spec"] == spec and desired_size() == 2
    assert HOLD_OPTIONS["stepSizePercent"] == 0


# -- the release's interface, driven as raylift.release.blue_green drives it ---------------------------------------
RUN = "manual__2025-01-01T00:00:00"


def arm(cluster: str) -> str:
    """Where a cluster's arm answers from outside the Kubernetes cluster: KubeRay's Gateway (the internal NLB)."""
    return f"http://{NLB}:80/raylift-arm/{cluster}"


@pytest.fixture()
def operator(serving: KubeRayModel, monkeypatch: pytest.MonkeyPatch) -> tuple[KubeRayModel, list[float]]:
    """KubeRay at work while raylift waits: one reconcile before each read of a held upgrade's wait, and one in each
    pause between tries of restoring the node group (the model has no deletion delay: the next reconcile deletes).
    Returns the model and the pauses raylift took between those tries."""
    model, pauses = serving, list[float]()
    poll = RayServiceUpgradeTrigger.poll

    def reconciled_poll(self: RayServiceUpgradeTrigger) -> Any:
        model.reconcile()
        return poll(self)

    monkeypatch.setattr(RayServiceUpgradeTrigger, "poll", reconciled_poll)
    def pause(self: EksTarget, seconds: float) -> None:
        pauses.append(seconds)
        model.reconcile()

    monkeypatch.setattr(EksTarget, "_sleep", pause)
    return model, pauses


def started_release(model: KubeRayModel, state: DeploymentState,
                    timeout_s: float | None = None) -> tuple[dict[str, Any], Any]:
    """What the deploy step does for a new image (a canary release planned blue/green): cluster_change, the pair,
    start_blue_green (with the run's ``deploy_timeout_s``, when given), then its wait on the candidate, KubeRay
    reconciling; returns (config, the candidate target)."""
    t = target(image=NEW_IMAGE)
    current = t.current_serve_config()
    change = t.cluster_change()
    assert change == f"a new rayClusterConfig (image {IMAGE} -> {NEW_IMAGE})"
    assert t.on_cluster(t.blue_green_pair().candidate).endpoint_url  # the deploy step's cluster_of, before anything
    app = serve_config(model="first")["applications"][0]
    config, green = start_blue_green(t, state, RUN, app, current, "llm", defaults={}, change=change,
                                     timeout_s=timeout_s, log=logging.getLogger("test"))
    assert state.blue_green(RUN) == {"serving": "llm-00001", "candidate": "pending", "change": change,
                                     "stage": STARTED, "serving_config_hash": state.blue_green(RUN)["serving_config_hash"],
                                     "workers": 1, **({"timeout_s": timeout_s} if timeout_s else {})}
    assert stored(model)["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]["stepSizePercent"] == 0
    assert desired_size() == 4
    eks_follows_the_node_group()
    model.reconcile_times(6)
    event = round_trip(green.deploy_trigger(app_names=["llm"], timeout_s=5)).wait()
    assert event["status"] == "success" and event["candidate"] == "llm-00002", event
    return config, green


def test_a_blue_green_release_holds_the_candidate_measures_both_clusters_then_promote_switches_and_restores(
        operator: tuple[KubeRayModel, list[float]], tmp_path: Path) -> None:
    model, pauses = operator
    state = DeploymentState(LocalStore(tmp_path), "eks", "llm")
    config, _ = started_release(model, state)
    assert target(image=NEW_IMAGE).cluster_change() is not None  # a retried deploy step still plans blue/green
    retried, _ = start_blue_green(target(image=NEW_IMAGE), state, RUN, app_by_name(config, "llm") or {},
                                  target().current_serve_config(), "llm", defaults={}, change="retry")
    assert retried == config and model.created == ["llm-00001", "llm-00002"]  # the hold is kept, nothing new

    app = app_by_name(config, "llm") or {}
    measured = arms(target(image=NEW_IMAGE), state, RUN, config, "llm")  # the deploy step's execute_complete
    assert (measured["endpoint"], measured["baseline_endpoint"]) == (app_url(arm("llm-00002"), app),
                                                                    app_url(arm("llm-00001"), app))
    envoy = model.envoy
    assert envoy is not None  # each arm reaches its own cluster's Serve, at the app's own path
    assert envoy.route(measured["endpoint"] + "/v1/completions") == ("llm-00002-serve-svc", app_url("/", app)
                                                                     + "/v1/completions")
    assert envoy.route(measured["baseline_endpoint"] + "/v1/completions") == (
        "llm-00001-serve-svc", app_url("/", app) + "/v1/completions")
    assert (measured["serving_cluster"], measured["candidate_cluster"]) == ("llm-00001", "pending")
    status = model.status()
    assert status["activeServiceStatus"]["trafficRoutedPercent"] == 100  # users stay on the serving cluster
    assert status["pendingServiceStatus"]["trafficRoutedPercent"] == 0
    assert (model.active(), model.serve_service) == ("llm-00001", "llm-00001")

    done = promote_blue_green(target(image=NEW_IMAGE), state, RUN)
    assert (model.active(), model.pending(), model.serve_service) == ("llm-00002", "", "llm-00002")
    assert model.deleted == ["llm-00001"]
    # one pause per arm's HTTPRoute (Envoy Gateway accepted it meanwhile), then one while the old cluster's pods
    # held its nodes at the first try of the restore (KubeRay deleted it meanwhile)
    assert pauses == [0.05, 0.05, 0.05]
    assert stored(model)["spec"]["upgradeStrategy"] == {"type": "NewCluster"}
    assert desired_size() == 2 and len(hosts()) == 2  # the size before the hold, read back from EKS and EC2
    assert {p["status"]["hostIP"] for p in model.kube.ray_pods[(NS, "llm-00002")]} >= set(hosts())
    assert state.blue_green(RUN)["stage"] == RETIRED
    assert "KubeRay deletes the old cluster llm-00001; node group gpu back from 4 to 2 node(s)" in done, done
    assert sorted(model.kube.httproutes) == [(NS, f"{SERVICE}-httproute")]  # the arms' routes are gone


@pytest.mark.parametrize("step", ["promote", "rollback"])
def test_the_switch_and_the_removal_wait_as_long_as_the_runs_deploy_timeout(
        operator: tuple[KubeRayModel, list[float]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    """Issue 55 item 4: KubeRay's switch may grow the candidate onto new nodes pulling a multi-GB image, so promote's
    wait (and the rollback's wait for the removal) is the run's ``deploy_timeout_s`` (kept in the release's record
    by the deploy step), not a fixed 600 s."""
    model, _ = operator
    waits: list[float] = []
    poll = RayServiceUpgradeTrigger.poll  # the fixture's: KubeRay reconciles before each read

    def spied(self: RayServiceUpgradeTrigger) -> Any:
        waits.append(self.timeout_s)
        return poll(self)

    monkeypatch.setattr(RayServiceUpgradeTrigger, "poll", spied)
    state = DeploymentState(LocalStore(tmp_path), "eks", "llm")
    started_release(model, state, timeout_s=5400.0)
    waits.clear()  # the deploy step's own wait (started_release's) is the operator's, given there
    if step == "promote":
        promote_blue_green(target(image=NEW_IMAGE), state, RUN)
        assert model.active() == "llm-00002"
    else:
        undo_release(target(image=NEW_IMAGE), state, RUN, "llm")
        assert model.active() == "llm-00001" and "llm-00002" in model.deleted
    assert waits and set(waits) == {5400.0}, waits


def test_the_deploy_records_the_cold_start_of_each_ray_pod_the_release_started(
        operator: tuple[KubeRayModel, list[float]], tmp_path: Path) -> None:
    """Issue 55 item 9: on EKS most of a new image's wait is Kubernetes' (a node joining, the image pulled, Ray
    starting), and the replicas' logs are behind a dashboard Airflow does not reach, so the deploy step's cold start
    (``cold_start.json``) names each Ray pod the release started, by phase, from the pods' own timestamps."""
    import time

    from raylift.operators.cold_start import ColdStartMixin
    from raylift.release.state import run_file

    model, _ = operator
    model.pod_phases = (180.0, 3.0, 95.0, 12.0)  # a node joins, the init container, the image, Ray ready
    for pod in model.kube.ray_pods[(NS, "llm-00001")]:  # the serving cluster's pods, started an hour ago
        pod["metadata"]["creationTimestamp"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
    state = DeploymentState(LocalStore(tmp_path), "eks", "llm")
    started_release(model, state)

    class DeployStep(ColdStartMixin):  # the deploy operator's part, on the target the DAG builds
        app_name, log, target_impl = "llm", logging.getLogger("test"), target(image=NEW_IMAGE)

        def state_for(self, app_name: str) -> DeploymentState:
            return state

    cold = DeployStep().collect_cold_start("llm", time.time(), RUN, {"serve_write_s": 0.3, "serve_to_running_s": 4.0},
                                           note="blue/green: the candidate's replicas run on the pending cluster")
    started = sorted(p["metadata"]["name"] for p in model.kube.ray_pods[(NS, "llm-00002")])
    assert [p["pod"] for p in cold["pods"]] == started == ["llm-00002-gpu-0", "llm-00002-gpu-1", "llm-00002-head"]
    assert {p["cluster"] for p in cold["pods"]} == {"llm-00002"}  # none of the serving cluster's
    for pod in cold["pods"]:
        assert pod["phases_s"] == {"node_s": 180.0, "init_s": 3.0, "image_and_start_s": 95.0, "ray_ready_s": 12.0}
        assert pod["total_s"] == 290.0
    assert state.store.read_json(run_file(RUN, "cold_start"))["pods"] == cold["pods"]


def test_a_rejected_blue_green_release_removes_the_pending_cluster_and_leaves_the_serving_one(
        operator: tuple[KubeRayModel, list[float]], tmp_path: Path) -> None:
    model, _ = operator
    spec_before = stored(model)["spec"]
    cluster_before = model.kube.rayclusters[(NS, "llm-00001")]
    state = DeploymentState(LocalStore(tmp_path), "eks", "llm")
    started_release(model, state)

    undone = undo_release(target(image=NEW_IMAGE), state, RUN, "llm")  # the rollback step: undo_blue_green first
    assert undone.startswith("the candidate cluster llm-00002 removed by KubeRay; node group gpu back from 4 to 2")
    assert undone.endswith("the llm-00001 cluster serves, never changed"), undone
    assert (model.active(), model.pending(), model.serve_service) == ("llm-00001", "", "llm-00001")
    assert "llm-00002" in model.deleted and model.kube.rayclusters[(NS, "llm-00001")] == cluster_before
    assert stored(model)["spec"] == spec_before  # read back from the stand-in: the spec as before the release
    assert desired_size() == 2 and len(hosts()) == 2
    assert state.blue_green(RUN)["stage"] == REMOVED
    assert sorted(model.kube.httproutes) == [(NS, f"{SERVICE}-httproute")]
    assert undo_blue_green(target(), state, RUN) == (
        "the endpoint already serves the pending cluster (stage removed): nothing rolled back")


def test_a_blue_green_pair_without_a_gateway_class_is_refused_before_anything_changes(
        serving: KubeRayModel, tmp_path: Path) -> None:
    model = serving
    spec = stored(model)["spec"]
    t = target(image=NEW_IMAGE, gateway_class=None)
    assert t.cluster_change() == f"a new rayClusterConfig (image {IMAGE} -> {NEW_IMAGE})"
    assert target().cluster_change() is None  # the serving spec again: the running cluster takes it
    with pytest.raises(ClusterError, match=r"target option 'gateway_class'.*or release: direct"):
        t.blue_green_pair()
    state = DeploymentState(LocalStore(tmp_path), "eks", "llm")
    with pytest.raises(ClusterError, match="gateway_class"):
        start_blue_green(t, state, RUN, serve_config(model="first")["applications"][0], t.current_serve_config(),
                         "llm", defaults={}, change="a new image")
    with pytest.raises(ClusterError, match="upgrade_strategy 'None'.*or release: direct"):
        target(image=NEW_IMAGE, upgrade_strategy="None").blue_green_pair()
    assert state.blue_green(RUN) is None
    assert stored(model)["spec"] == spec and desired_size() == 2 and model.created == ["llm-00001"]


@pytest.mark.parametrize("serving", [None], indirect=True)  # Envoy's Service never gets a load balancer address
def test_without_a_gateway_address_kuberay_never_grows_the_candidate_and_raylift_says_why(
        serving: KubeRayModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """KubeRay v1.7 raises the pending cluster's capacity only once its Gateway is Accepted and Programmed
    (checkIfNeedTargetCapacityUpdate, IsGatewayReady): with the load balancer controller ignoring Envoy's Service
    (the stack before its EnvoyProxy), the held candidate stays at capacity 0 and the release cannot measure it."""
    model = serving
    t = target(image=NEW_IMAGE)
    t.hold_candidate(serve_config(model="first"))
    eks_follows_the_node_group()
    model.reconcile_times(12)
    gateway = model.kube.gateways[(NS, f"{SERVICE}-gateway")]
    conditions = {c["type"]: (c["status"], c["reason"]) for c in gateway["status"]["conditions"]}
    assert conditions == {"Accepted": ("True", "Accepted"), "Programmed": ("False", "AddressNotAssigned")}
    assert model.capacity_blocked == "Gateway for RayService NewClusterWithIncrementalUpgrade is not ready."
    assert model.pending() == "llm-00002" and model.status()["pendingServiceStatus"].get("targetCapacity", 0) == 0
    event = round_trip(t.candidate_trigger(app_names=["llm"], timeout_s=0.3)).wait()
    assert event["status"] == "timeout", event
    assert f"Gateway {NS}/{SERVICE}-gateway is Accepted and Programmed" in event["message"], event
    with pytest.raises(ClusterError, match=r"is not Accepted and Programmed with an address.*internal NLB"):
        t.eks_candidate_endpoint()
    assert model.kube.httproutes.keys() == {(NS, f"{SERVICE}-httproute")}  # no arm route was applied

    model.envoy = EnvoyGateway(model.kube, load_balancer=NLB, services=lambda ns: model.serve_services())
    model.reconcile_times(3)  # the address arrives (terraform's EnvoyProxy): KubeRay grows the candidate
    assert model.status()["pendingServiceStatus"]["targetCapacity"] == 100
    assert model.status()["pendingServiceStatus"]["trafficRoutedPercent"] == 0
    assert round_trip(t.candidate_trigger(app_names=["llm"], timeout_s=5)).wait()["status"] == "success"
