"""A blue/green release on ECS against moto: green starts beside blue, the endpoint moves only at the switch, then
blue is retired, or green removed (a rejection) with blue untouched.

What is asserted is moto's own record (DescribeServices, DescribeTaskDefinition, Cloud Map's instances) and the
requests raylift sent, in order, as the proxy in front of moto saw them. The test's own set-up, and the stand-in for
ECS's scheduler starting tasks, go to moto directly (``direct``), so the proxy sees raylift's calls only (and the
trigger's polls).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from raylift.errors import ClusterCapacityError, ClusterError, RayliftValueError
from raylift.targets import get_target
from raylift.targets.ecs import EcsTarget
from raylift.targets.ecs_blue_green import GreenPlan
from tests.aws.standins import Proxy
from tests.aws.test_ecs_image_rollout import first_event

BUCKET = "raylift-models"
REPO = "ray-vllm"
NAMESPACE = "raylift.local"
ECS = "AmazonEC2ContainerServiceV20141113."
CLOUD_MAP = "Route53AutoNaming_v20170314."
# the calls that change something, as the proxy names them (X-Amz-Target)
CHANGES = {ECS + op for op in ("RegisterTaskDefinition", "CreateService", "UpdateService", "DeleteService",
                               "StopTask")} | {CLOUD_MAP + "RegisterInstance"}  # fmt: skip
STABLE = "-- green_ready_trigger: success --"


Direct = Callable[[str], Any]


@pytest.fixture()
def direct(aws: str) -> Direct:
    """A boto3 client straight to moto (past the proxy): the test's set-up and ECS's scheduler."""
    from botocore.config import Config

    # no host prefix: Cloud Map's DiscoverInstances would go to data-127.0.0.1
    return lambda service: boto3.client(service, endpoint_url=aws, config=Config(inject_host_prefix=False))


def stack(direct: Direct, *, task_memory: str = "2048", instances: int = 1, workers: int = 2) -> str:
    """What terraform's ecs_ray creates, running: the head and worker task definitions (the workers find their head
    through RAY_HEAD_ADDRESS), services on them in a VPC, Cloud Map's namespace with the head, head-green and
    endpoint services, ``instances`` container instances; blue runs (1 head, ``workers`` workers). Returns the
    repository URI."""
    direct("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    repo = str(direct("ecr").create_repository(repositoryName=REPO)["repository"]["repositoryUri"])
    ec2, ecs, sd = direct("ec2"), direct("ecs"), direct("servicediscovery")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    sd.create_private_dns_namespace(Name=NAMESPACE, Vpc=vpc)
    namespace = sd.list_namespaces()["Namespaces"][0]["Id"]
    registries = {
        name: sd.create_service(Name=name, NamespaceId=namespace,
                                DnsConfig={"DnsRecords": [{"Type": "A", "TTL": 10}]})["Service"]["Arn"]
        for name in ("head", "head-green", "serve")
    }  # fmt: skip
    ecs.create_cluster(clusterName="ray")
    for role in ("head", "worker"):
        env = [{"name": "RAY_HEAD_ADDRESS", "value": f"head.{NAMESPACE}:6379"}]
        ecs.register_task_definition(
            family=f"ray-{role}", networkMode="awsvpc", requiresCompatibilities=["EC2"], cpu="1024",
            memory=task_memory, tags=[{"key": "stack", "value": "raylift"}],
            containerDefinitions=[{"name": f"ray_{role}", "image": f"{repo}:latest", "memory": 512, "environment": env,
                                   "resourceRequirements": []}],
        )  # fmt: skip
        ecs.create_service(
            cluster="ray", serviceName=f"ray-{role}", taskDefinition=f"ray-{role}", desiredCount=0,
            networkConfiguration={"awsvpcConfiguration": {"subnets": [subnet], "securityGroups": []}},
            serviceRegistries=[{"registryArn": registries["head"]}] if role == "head" else [],
            tags=[{"key": "stack", "value": "raylift"}],
        )  # fmt: skip
    ecs.update_service(cluster="ray", service="ray-head", desiredCount=1)  # moto: running = desired
    ecs.update_service(cluster="ray", service="ray-worker", desiredCount=workers)
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    for _ in range(instances):
        instance = ec2.run_instances(ImageId=ami, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
        ecs.register_container_instance(cluster="ray", instanceIdentityDocument=json.dumps({"instanceId": instance}))
    return repo


def target(**extra: Any) -> EcsTarget:
    options = {"cluster": "ray", "bucket": BUCKET, "cloud_map_namespace": NAMESPACE,
               "endpoint_cloud_map_service": "serve", "scale_poll_interval_s": 0.05, "scale_timeout_s": 5} | extra  # fmt: skip
    t = get_target("ecs", **json.loads(json.dumps(options)))
    assert isinstance(t, EcsTarget)
    return t


def ecs_runs(direct: Direct, plan: GreenPlan) -> str:
    """ECS's scheduler, as moto leaves it to the test: green's tasks run (the head one with an ENI IP)."""
    ecs = direct("ecs")
    for name in (plan.green_head, plan.green_worker):
        desired = ecs.describe_services(cluster="ray", services=[name])["services"][0]["desiredCount"]
        ecs.update_service(cluster="ray", service=name, desiredCount=desired)
    network = ecs.describe_services(cluster="ray", services=[plan.green_head])["services"][0]["networkConfiguration"]
    task = ecs.run_task(cluster="ray", taskDefinition=plan.head_revision, group=f"service:{plan.green_head}",
                        networkConfiguration=network, launchType="FARGATE")["tasks"][0]  # fmt: skip
    return str(next(d["value"] for a in task["attachments"] for d in a["details"] if d["name"] == "privateIPv4Address"))


def changes(proxy: Proxy) -> list[tuple[str, str]]:
    """raylift's changing calls, in order, as (operation, what it named), and the test's STABLE marker."""
    seen: list[tuple[str, str]] = []
    for name, body in proxy.bodies:
        if name == STABLE:
            seen.append((STABLE, ""))
        elif name in CHANGES:
            request = json.loads(body)
            what = request.get("serviceName") or request.get("service") or request.get("family") or request.get(
                "InstanceId", "")
            seen.append((name.split(".", 1)[1], f"{what} {request.get('desiredCount', '')}".strip()))
    return seen


def services(direct: Direct, *names: str) -> dict[str, dict[str, Any]]:
    reply = direct("ecs").describe_services(cluster="ray", services=list(names))
    return {s["serviceName"]: s for s in reply["services"]}


def endpoint(direct: Direct) -> list[str]:
    """The IPs the endpoint's Cloud Map service answers (moto's record). AWS's RegisterInstance of an existing
    instance id updates it; moto appends another registration, so the last one per id is what AWS would hold."""
    reply = direct("servicediscovery").discover_instances(NamespaceName=NAMESPACE, ServiceName="serve")
    latest = {i["InstanceId"]: i["Attributes"]["AWS_INSTANCE_IPV4"] for i in reply["Instances"]}
    return sorted(latest.values())


def test_a_release_starts_green_beside_blue_and_moves_the_endpoint_only_at_the_switch(
    s3_proxy: Proxy, direct: Direct
) -> None:
    repo = stack(direct)
    image = f"{repo}@sha256:" + "b" * 64
    blue_tds = {n: s["taskDefinition"] for n, s in services(direct, "ray-head", "ray-worker").items()}
    t = target()

    plan = t.green_plan(image)
    assert (plan.blue_head, plan.blue_worker, plan.green_head, plan.green_worker, plan.green_discovery) == (
        "ray-head", "ray-worker", "ray-head-green", "ray-worker-green", "head-green")
    assert (plan.workers, plan.outage, plan.image) == (2, False, image)
    assert GreenPlan.from_dict(json.loads(json.dumps(plan.as_dict()))) == plan
    assert changes(s3_proxy) == []  # a plan starts nothing

    t.start_green(plan)
    started = GreenPlan.from_dict(t.blue_green_record()["plan"])
    assert started.head_revision and started.head_revision.endswith("ray-head:2")
    assert started.worker_revision and started.worker_revision.endswith("ray-worker:2")
    # the green worker joins green's head; both run the image; blue's revisions are as they were
    worker_rev = direct("ecs").describe_task_definition(taskDefinition="ray-worker:2")["taskDefinition"]
    assert worker_rev["containerDefinitions"][0]["environment"] == [
        {"name": "RAY_HEAD_ADDRESS", "value": f"head-green.{NAMESPACE}:6379"}]  # fmt: skip
    assert worker_rev["containerDefinitions"][0]["image"] == image
    green = services(direct, "ray-head-green", "ray-worker-green")
    assert {n: s["desiredCount"] for n, s in green.items()} == {"ray-head-green": 1, "ray-worker-green": 2}
    assert green["ray-head-green"]["networkConfiguration"] == services(direct, "ray-head")["ray-head"]["networkConfiguration"]
    head_green = direct("servicediscovery").list_services()["Services"]
    assert green["ray-head-green"]["serviceRegistries"] == [
        {"registryArn": next(s["Arn"] for s in head_green if s["Name"] == "head-green")}]  # fmt: skip
    created = [json.loads(b) for n, b in s3_proxy.bodies if n == ECS + "CreateService"]
    assert all(r["tags"] == [{"key": "stack", "value": "raylift"}] for r in created)

    # a retry resumes: no second revision, no second service
    t.start_green(plan)
    assert [a.rsplit(":", 1)[1] for a in direct("ecs").list_task_definitions(familyPrefix="ray-worker")[
        "taskDefinitionArns"]] == ["1", "2"]  # fmt: skip

    green_ip = ecs_runs(direct, started)
    event = first_event(t.green_ready_trigger(plan))
    assert event["status"] == "success" and sorted(event["services"]) == ["ray-head-green", "ray-worker-green"]
    s3_proxy.bodies.append((STABLE, b""))
    assert endpoint(direct) == []  # nobody moved yet

    t.switch_to_green(started)
    assert endpoint(direct) == [green_ip]
    assert t.active_pair() == ("ray-head-green", "ray-worker-green")
    t.retire_blue(started)

    assert changes(s3_proxy) == [
        ("RegisterTaskDefinition", "ray-head"), ("RegisterTaskDefinition", "ray-worker"),
        ("CreateService", "ray-head-green 1"), ("CreateService", "ray-worker-green 2"),
        (STABLE, ""), ("RegisterInstance", "raylift-endpoint"),
        ("UpdateService", "ray-worker 0"), ("UpdateService", "ray-head 0"),
        ("DeleteService", "ray-worker"), ("DeleteService", "ray-head"),
    ]  # fmt: skip
    switch = changes(s3_proxy).index(("RegisterInstance", "raylift-endpoint"))
    touched_blue = [c for c in changes(s3_proxy)[:switch] if c[0] in ("UpdateService", "DeleteService", "StopTask")]
    assert touched_blue == []
    blue = direct("ecs").describe_services(cluster="ray", services=["ray-head", "ray-worker"])["services"]
    assert {s["serviceName"]: (s["status"], s["desiredCount"]) for s in blue} == {
        "ray-head": ("INACTIVE", 0), "ray-worker": ("INACTIVE", 0)}  # fmt: skip
    assert {n: s["taskDefinition"] for n, s in services(direct, "ray-head", "ray-worker").items()} == blue_tds


def test_a_rejected_release_removes_green_and_leaves_blue_as_it_was(s3_proxy: Proxy, direct: Direct) -> None:
    repo = stack(direct)
    before = services(direct, "ray-head", "ray-worker")
    t = target()
    plan = t.green_plan(f"{repo}@sha256:" + "c" * 64)
    t.start_green(plan)
    started = GreenPlan.from_dict(t.blue_green_record()["plan"])
    ecs_runs(direct, started)

    t.remove_green(started)
    green = direct("ecs").describe_services(cluster="ray", services=["ray-head-green", "ray-worker-green"])["services"]
    assert {s["serviceName"]: s["status"] for s in green} == {"ray-head-green": "INACTIVE", "ray-worker-green": "INACTIVE"}
    after = services(direct, "ray-head", "ray-worker")
    keep = ("status", "desiredCount", "runningCount", "taskDefinition", "networkConfiguration", "serviceRegistries")
    assert {n: {k: s.get(k) for k in keep} for n, s in after.items()} == {
        n: {k: s.get(k) for k in keep} for n, s in before.items()}  # fmt: skip
    for family in ("ray-head", "ray-worker"):  # blue's revisions, read back, as registered
        td = direct("ecs").describe_task_definition(taskDefinition=f"{family}:1")["taskDefinition"]
        assert td["containerDefinitions"][0]["image"] == f"{repo}:latest" and td["status"] == "ACTIVE"
        assert td["containerDefinitions"][0]["environment"] == [
            {"name": "RAY_HEAD_ADDRESS", "value": f"head.{NAMESPACE}:6379"}]  # fmt: skip
    assert not [c for c in changes(s3_proxy) if c[0] in ("UpdateService", "DeleteService", "StopTask")
                and c[1].split()[0] in ("ray-head", "ray-worker")]  # fmt: skip
    assert t.active_pair() == ("ray-head", "ray-worker")
    with pytest.raises(Exception, match="only after switch_to_green"):
        t.retire_blue(started)  # blue serves: never retired without a switch


def test_green_that_does_not_fit_beside_blue_is_refused_with_the_numbers(s3_proxy: Proxy, direct: Direct) -> None:
    repo = stack(direct, task_memory="4096", instances=2)  # moto's instances have 4096 CPU units, 7482 MiB each
    t = target()
    with pytest.raises(ClusterCapacityError) as refused:
        t.green_plan(f"{repo}@sha256:" + "d" * 64)
    message = str(refused.value)
    assert "needs CPU 3072 units, memory 12288 MiB, GPU 0" in message, message
    assert "the 2 container instance(s) have CPU 8192 units, memory 14964 MiB, GPU 0 free" in message, message
    assert "1 of 3 task(s) find no room" in message, message
    assert "blue_green_surge = true" in message and "surge 'none'" in message, message
    assert changes(s3_proxy) == []  # nothing registered, nothing created
    assert sorted(services(direct, "ray-head-green", "ray-worker-green")) == []

    with pytest.raises(RayliftValueError, match=r"surge must be one of \['auto', 'none'\] \(got 'max'\)"):
        t.green_plan(f"{repo}@sha256:" + "d" * 64, surge="max")


def test_surge_none_skips_the_check_and_announces_an_outage(
    s3_proxy: Proxy, direct: Direct, caplog: pytest.LogCaptureFixture
) -> None:
    repo = stack(direct, task_memory="4096", instances=2)
    with caplog.at_level(logging.WARNING, logger="raylift.targets.ecs_blue_green"):
        plan = target().green_plan(f"{repo}@sha256:" + "e" * 64, surge="none")
    assert (plan.surge, plan.outage) == ("none", True)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "ANNOUNCED OUTAGE" in r.getMessage()]
    assert warned and "surge 'none'" in warned[0].getMessage()


def test_colours_alternate_release_after_release(s3_proxy: Proxy, direct: Direct) -> None:
    repo = stack(direct)
    t = target()
    pairs = []
    for n, digest in enumerate(("1" * 64, "2" * 64)):
        plan = t.green_plan(f"{repo}@sha256:{digest}")
        t.start_green(plan)
        started = GreenPlan.from_dict(t.blue_green_record()["plan"])
        ip = ecs_runs(direct, started)
        assert first_event(t.green_ready_trigger(started))["status"] == "success"
        t.switch_to_green(started)
        t.retire_blue(started)
        assert endpoint(direct) == [ip], n
        pairs.append((plan.blue_head, plan.green_head, plan.green_discovery))
    assert pairs == [("ray-head", "ray-head-green", "head-green"), ("ray-head-green", "ray-head", "head")]
    assert t.active_pair() == ("ray-head", "ray-worker")
    # the second green's workers join the base pair's head again
    worker = services(direct, "ray-worker")["ray-worker"]["taskDefinition"]
    env = direct("ecs").describe_task_definition(taskDefinition=worker)["taskDefinition"]["containerDefinitions"][0]
    assert env["environment"] == [{"name": "RAY_HEAD_ADDRESS", "value": f"head.{NAMESPACE}:6379"}]
    assert env["image"] == f"{repo}@sha256:" + "2" * 64


def test_the_capacity_providers_auto_scaling_groups_count_in_whole_instances(s3_proxy: Proxy, direct: Direct) -> None:
    """Blue's services place on a capacity provider whose Auto Scaling group runs one instance: green (3 tasks, one
    per instance) fits only if the group may launch two more of its kind."""
    repo = stack(direct, task_memory="4096", instances=0)
    ec2, ecs, asg = direct("ec2"), direct("ecs"), direct("autoscaling")
    ami = ec2.describe_images()["Images"][0]["ImageId"]
    asg.create_launch_configuration(LaunchConfigurationName="ray", ImageId=ami, InstanceType="g5.12xlarge")
    asg.create_auto_scaling_group(AutoScalingGroupName="ray-workers", LaunchConfigurationName="ray", MinSize=0,
                                  MaxSize=3, DesiredCapacity=1, AvailabilityZones=["us-west-2a"])  # fmt: skip
    group = asg.describe_auto_scaling_groups(AutoScalingGroupNames=["ray-workers"])["AutoScalingGroups"][0]
    ecs.register_container_instance(cluster="ray", instanceIdentityDocument=json.dumps(
        {"instanceId": group["Instances"][0]["InstanceId"]}))  # fmt: skip
    ecs.create_capacity_provider(name="ray-workers", autoScalingGroupProvider={
        "autoScalingGroupArn": group["AutoScalingGroupARN"]})  # fmt: skip
    for name in ("ray-head", "ray-worker"):
        ecs.update_service(cluster="ray", service=name,
                           capacityProviderStrategy=[{"capacityProvider": "ray-workers", "weight": 1}])  # fmt: skip
    image = f"{repo}@sha256:" + "f" * 64

    assert target().green_plan(image).workers == 2  # 1 on the instance, 2 on instances the group launches

    asg.update_auto_scaling_group(AutoScalingGroupName="ray-workers", MaxSize=2)
    with pytest.raises(ClusterCapacityError) as refused:
        target().green_plan(image)
    message = str(refused.value)
    assert "Auto Scaling group ray-workers (ray-workers) can launch 1 more (MaxSize 2, 1 running)" in message, message
    assert "1 of 3 task(s) find no room" in message, message
    assert changes(s3_proxy) == []


def scheduler_runs_green(direct: Direct, timeout_s: float = 10) -> str:
    """Once raylift created green's services (their revisions set), run them as ECS's scheduler would (ecs_runs)."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = services(direct, "ray-head-green", "ray-worker-green")
        if len(found) == 2 and all(s["status"] == "ACTIVE" for s in found.values()):
            head = found["ray-head-green"]
            plan = GreenPlan(cluster="ray", blue_head="ray-head", blue_worker="ray-worker", green_head="ray-head-green",
                             green_worker="ray-worker-green", green_discovery="head-green", image="", head_from="",
                             worker_from="", workers=2, head_revision=head["taskDefinition"])  # fmt: skip
            return ecs_runs(direct, plan)
        time.sleep(0.05)
    raise AssertionError("raylift created no green services")


SERVING: dict[str, Any] = {"applications": {}}  # what the dashboard stand-in lists as Serve's applications


@pytest.fixture()
def green_dashboard() -> Any:
    """A stand-in for the Ray dashboards on 127.0.0.1: the version page (what start_cluster waits for) and Serve's
    applications (``SERVING``: whether blue serves an app)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    SERVING["applications"] = {}

    class Version(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.startswith("/api/serve/applications/"):
                body = json.dumps(SERVING).encode()
            else:
                body = b'{"ray_version": "2.60.0"}'
            self.send_response(200 if self.path == "/api/version" or self.path.startswith("/api/serve/") else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Version)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


class ProxyMetrics:
    """A stand-in for a Ray head's metrics export (``--metrics-export-port``) with Serve's proxy on it: the gauge
    ray/serve/_private/request_ingress_metrics.py registers (``serve_num_ongoing_http_requests``, tags node_id and
    node_ip_address), set by ray/serve/_private/proxy.py as each request starts and ends, exported by Ray's metrics
    agent under the "ray" namespace (ray/_private/metrics_agent.py), with the tags Ray's exporter adds. ``ongoing``
    None: the proxy never took a request, so Ray exports no series for it."""

    def __init__(self) -> None:
        self.ongoing: float | None = None
        self.served: list[float | None] = []  # each scrape's reading, in order

    def exposition(self) -> bytes:
        self.served.append(self.ongoing)
        lines = ["# HELP ray_node_cpu_utilization Total CPU usage", "# TYPE ray_node_cpu_utilization gauge",
                 'ray_node_cpu_utilization{SessionName="session_2026",ip="127.0.0.1"} 12.5']
        if self.ongoing is not None:
            tags = ('Component="core_worker",NodeAddress="127.0.0.1",SessionName="session_2026",Version="2.60.0",'
                    'node_id="ab12",node_ip_address="127.0.0.1"')
            lines += ["# HELP ray_serve_num_ongoing_http_requests The number of ongoing requests in this HTTP Proxy.",
                      "# TYPE ray_serve_num_ongoing_http_requests gauge",
                      f"ray_serve_num_ongoing_http_requests{{{tags}}} {self.ongoing}"]
        return ("\n".join(lines) + "\n").encode()


@pytest.fixture()
def proxy_metrics() -> Any:
    """(the stand-in, its port) on 127.0.0.1: blue's head, as the Cloud Map records of these tests have it."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    metrics = ProxyMetrics()

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = metrics.exposition() if self.path == "/metrics" else b"not found"
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield metrics, server.server_address[1]
    server.shutdown()


def test_the_release_steps_carry_a_new_image_out_blue_green_through_the_target_interface(
    s3_proxy: Proxy, direct: Direct, green_dashboard: int, proxy_metrics: tuple[ProxyMetrics, int],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """What raylift.release.blue_green calls on ECS: the change read without a write, the scale step leaving the
    image to the release, the candidate pair started and reached through its own Cloud Map name, the switch, the
    old pair retired; the next task's target drives the new pair."""
    from raylift.release.blue_green import STARTED, promote_blue_green
    from raylift.release.state import DeploymentState
    from raylift.store import LocalStore

    repo = stack(direct)
    image = f"{repo}@sha256:" + "d" * 64
    monkeypatch.setattr(EcsTarget, "image_reference", lambda self: image)
    conn = json.loads(s3_proxy.conn_json())  # Cloud Map's DiscoverInstances: no "data-" host prefix before moto
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
        conn | {"extra": conn["extra"] | {"config_kwargs": {"inject_host_prefix": False}}}))
    metrics, metrics_port = proxy_metrics
    options = {"roll_out_image": True, "dashboard_port": green_dashboard, "endpoint_drain_s": 0.01,
               "metrics_port": metrics_port}
    t = target(**options)
    sd = direct("servicediscovery")
    head = next(s["Id"] for s in sd.list_services()["Services"] if s["Name"] == "head")
    sd.register_instance(ServiceId=head, InstanceId="blue-head-task",
                         Attributes={"AWS_INSTANCE_IPV4": "127.0.0.1"})  # ECS's registration of blue's head task
    # issue 55: a cluster that serves no app has nothing to protect: not blue/green (this test asserted the
    # opposite before: a new image on a cluster with no app was planned blue/green)
    assert t.cluster_change() is None
    SERVING["applications"] = {"llm": {"deployed_app_config": {"name": "llm", "import_path": "llm:app"}}}
    assert t.cluster_change() == f"a new image ({repo}:latest -> {image}, service ray-head)"  # blue serves an app
    t.cluster_change_in_place = False  # the scale step of a canary (raylift.release.plan.replaced_in_place)
    t.scale(workers=2)
    assert [c for c in changes(s3_proxy) if c[0] == "RegisterTaskDefinition"] == []  # the image is the release's
    blue_ip = ecs_runs(direct, GreenPlan(cluster="ray", blue_head="", blue_worker="", green_head="ray-head",
                                         green_worker="ray-worker", green_discovery="head", image="", head_from="",
                                         worker_from="", workers=2, head_revision="ray-head:1"))  # blue's head task
    t.ensure_endpoint()  # the cluster-ready step: the endpoint's name answers with the serving head from the start
    t.ensure_endpoint()  # once it answers, nothing more
    assert endpoint(direct) == [blue_ip]
    assert [c for c in changes(s3_proxy) if c[0] == "RegisterInstance"] == [("RegisterInstance", "raylift-endpoint")]
    with pytest.raises(ClusterError, match="endpoint_cloud_map_service"):
        target(**options, endpoint_cloud_map_service=None).blue_green_pair()
    pair = t.blue_green_pair()
    assert pair == ("ray-head", "ray-head-green")

    head_green = next(s["Id"] for s in sd.list_services()["Services"] if s["Name"] == "head-green")
    sd.register_instance(ServiceId=head_green, InstanceId="green-head-task",
                         Attributes={"AWS_INSTANCE_IPV4": "127.0.0.1"})  # ECS's registration of green's head task
    ran: dict[str, str] = {}
    scheduler = threading.Thread(target=lambda: ran.update(ip=scheduler_runs_green(direct)), daemon=True)
    scheduler.start()  # ECS's scheduler, as moto leaves it to the test: green's tasks run once its services exist
    t.start_cluster(pair.candidate, workers=2)
    scheduler.join(timeout=10)
    started = GreenPlan.from_dict(t.blue_green_record()["plan"])
    assert (started.blue_head, started.green_head, started.image) == ("ray-head", "ray-head-green", image)
    green = t.on_cluster(pair.candidate)
    assert (green.head_service, green.worker_service, green.cloud_map_service) == (
        "ray-head-green", "ray-worker-green", "head-green")
    assert green.endpoint_url() == "http://127.0.0.1:8000" and green.serve_dashboard_url().endswith(
        f":{green_dashboard}")
    assert t.head_service == "ray-head" and endpoint(direct) == [blue_ip]  # blue serves; nobody moved
    green_ip = ran["ip"]

    state = DeploymentState(LocalStore(tmp_path), "ecs", "llm")
    state.save_blue_green("run-1", {"serving": pair.serving, "candidate": pair.candidate, "stage": STARTED})
    # issue 55 item 4: blue is retired when its proxy carries no request, not after a fixed sleep. A stream still
    # on blue past the drain's deadline: promote fails, the endpoint is green's, blue still runs (nothing cut)
    metrics.ongoing = 1
    with pytest.raises(ClusterError, match="was not retired: .*1 request"):
        promote_blue_green(target(**options, endpoint_drain_timeout_s=0.3), state, "run-1")
    assert endpoint(direct) == [green_ip]
    assert [c for c in changes(s3_proxy) if c[0] == "DeleteService"] == []
    # the retried promote retires blue once the stream ends (1 s on), not before
    ended: dict[str, float] = {}
    stream = threading.Timer(1.0, lambda: (ended.update(at=time.monotonic()), setattr(metrics, "ongoing", 0)))
    stream.start()
    done = promote_blue_green(t, state, "run-1")
    assert time.monotonic() >= ended["at"] and metrics.served[-2:] == [0, 0]  # two quiet reads in a row
    assert "ray-head, ray-worker scaled in and deleted" in done, done
    assert endpoint(direct) == [green_ip]
    order = [c for c in changes(s3_proxy) if c[0] in ("RegisterInstance", "DeleteService")]
    assert order == [("RegisterInstance", "raylift-endpoint"), ("RegisterInstance", "raylift-endpoint"),
                     ("DeleteService", "ray-worker"),
                     ("DeleteService", "ray-head")]  # fmt: skip
    after = target(**options)  # the next task: it drives the pair that serves
    assert (after.head_service, after.worker_service, after.cloud_map_service) == (
        "ray-head-green", "ray-worker-green", "head-green")
    assert after.blue_green_pair() == ("ray-head-green", "ray-head")
