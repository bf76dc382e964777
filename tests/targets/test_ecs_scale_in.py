"""The ECS scale step drains Ray before it removes workers: moto holds the services and their awsvpc tasks,
botocore's own event hooks record the calls raylift makes, and a Ray dashboard stand-in on 127.0.0.1 answers as a
head does (its drain is a Ray job; the real drain is tests/hooks/test_ray_drain.py's, against a real cluster)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest

from raylift.errors import ClusterError
from raylift.operators.cluster import ScaleClusterOperator
from tests.fixtures.http_standin import JsonHandler, serve_http

HEAD_IP = "10.0.9.9"
REPLICA = {"replica_id": "r1", "state": "RUNNING"}


@dataclass
class Head:
    """What the stand-in head knows: its nodes, the Serve replicas on them, and whether a drain ends."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    replica_node: str = ""
    drains: bool = True  # False: a drain that never finishes (the node stays ALIVE)
    events: list[tuple[str, Any]] = field(default_factory=list)  # drains and AWS calls, in order


@pytest.fixture()
def head() -> Iterator[tuple[Head, int]]:
    state = Head()

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/api/v0/nodes"):
                self._json({"data": {"result": {"result": state.nodes}}})
            elif self.path.startswith("/api/v0/actors"):
                self._json({"data": {"result": {"result": [{"node_id": state.replica_node, "state": "ALIVE"}]}}})
            elif self.path.startswith("/api/serve/applications/"):
                deployment = {"deployment_config": {}, "replicas": [{**REPLICA, "node_id": state.replica_node}]}
                self._json({"applications": {"llm": {"deployments": {"LLM": deployment}}}})
            elif self.path.startswith("/api/jobs/") and self.path.endswith("/logs"):
                self._json({"logs": ""})
            elif self.path.startswith("/api/jobs/"):
                self._json({"status": "SUCCEEDED", "message": ""})
            else:
                self.send_error(404)

        def do_POST(self) -> None:  # a Ray job: raylift's drain, `ray drain-node` on the head
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            words = shlex.split(body["entrypoint"])
            drained = [words[i + 1] for i, w in enumerate(words) if w == "--node-id"]
            assert words[:2] == ["ray", "drain-node"] and "DRAIN_NODE_REASON_PREEMPTION" in words
            state.events.append(("drain", drained))
            if state.drains:  # what Ray's state API then says of a drained node
                for node in state.nodes:
                    if node["node_id"] in drained:
                        node |= {"state": "DEAD", "state_message": "Terminated due to preemption: raylift"}
            self._json({"submission_id": "raysubmit_drain"})

    with serve_http(Handler) as port:
        yield state, port


def ecs_with_workers(count: int) -> list[tuple[str, str]]:
    """An ECS cluster as terraform's: awsvpc task definition, head and worker services, and ``count`` worker tasks
    (moto's services start none: run in the service's group). Returns each worker task's (ARN, ENI IP)."""
    ec2, ecs = boto3.client("ec2"), boto3.client("ecs")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # as terraform's VPC (moto names ENIs)
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    network = {"awsvpcConfiguration": {"subnets": [subnet], "securityGroups": []}}
    ecs.create_cluster(clusterName="ray")
    ecs.register_task_definition(family="ray", networkMode="awsvpc", requiresCompatibilities=["EC2"],
                                 containerDefinitions=[{"name": "ray", "image": "ray:2.60.0", "memory": 512}])
    for name, desired in (("ray-head", 1), ("ray-worker", count)):
        ecs.create_service(cluster="ray", serviceName=name, taskDefinition="ray", desiredCount=desired,
                           networkConfiguration=network)
    tasks = ecs.run_task(cluster="ray", taskDefinition="ray", count=count, group="service:ray-worker",
                         networkConfiguration=network, launchType="FARGATE")["tasks"]
    return [(t["taskArn"], next(d["value"] for a in t["attachments"] for d in a["details"]
                                 if d["name"] == "privateIPv4Address")) for t in tasks]


def ray_node(node_id: str, ip: str, *, head: bool = False) -> dict[str, Any]:
    return {"node_id": node_id, "node_ip": ip, "is_head_node": head, "state": "ALIVE",
            "resources_total": {"CPU": 8.0, "GPU": 1.0}}


def scale_op(port: int, workers: int, **options: Any) -> ScaleClusterOperator:
    return ScaleClusterOperator(task_id="scale", workers=workers, target="ecs", target_options={
        "cluster": "ray", "bucket": "b", "head_address": "127.0.0.1", "dashboard_port": port, "gpus_per_node": 1,
        **options})


def record_calls(op: ScaleClusterOperator, events: list[tuple[str, Any]]) -> None:
    """Every ECS call raylift's hook makes, as botocore sends it, into the same timeline as the drains."""
    def before(params: dict[str, Any], model: Any, **_: Any) -> None:
        events.append((model.name, dict(params)))

    op.target_impl._ecs().conn.meta.events.register("provide-client-params.ecs", before)  # type: ignore[attr-defined]


def changes(events: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The drains and the calls that change capacity, in order."""
    return [(name, params if name == "drain" else {k: params.get(k) for k in ("service", "desiredCount", "task")
                                                   if params.get(k) is not None})
            for name, params in events if name in ("drain", "UpdateService", "StopTask")]


def test_scale_in_drains_the_worker_without_replicas_then_stops_exactly_its_task(
        aws: str, head: tuple[Head, int]) -> None:
    state, port = head
    (task_a, ip_a), (task_b, ip_b) = ecs_with_workers(2)
    state.nodes = [ray_node("h", HEAD_IP, head=True), ray_node("node-a", ip_a), ray_node("node-b", ip_b)]
    state.replica_node = "node-a"  # Serve's replica runs on a: b goes
    op = scale_op(port, 1)
    record_calls(op, state.events)

    want = op.execute({})

    assert want["nodes"] == 2
    assert changes(state.events) == [
        ("drain", ["node-b"]),  # Ray drains b first; capacity moves only then, and only for b's task
        ("UpdateService", {"service": "ray-worker", "desiredCount": 1}),
        ("StopTask", {"task": task_b}),
        ("UpdateService", {"service": "ray-head", "desiredCount": 1}),  # the plain scale that follows
        ("UpdateService", {"service": "ray-worker", "desiredCount": 1}),
    ]
    ecs = boto3.client("ecs")
    # desiredStatus: what ECS was told (moto walks lastStatus through its lifecycle on each describe)
    described = {t["taskArn"]: t["desiredStatus"] for t in ecs.describe_tasks(cluster="ray", tasks=[task_a, task_b])["tasks"]}
    assert described == {task_a: "RUNNING", task_b: "STOPPED"}
    assert ecs.describe_services(cluster="ray", services=["ray-worker"])["services"][0]["desiredCount"] == 1


def test_a_drain_that_does_not_finish_fails_the_step_and_leaves_capacity(aws: str, head: tuple[Head, int]) -> None:
    state, port = head
    (task_a, ip_a), (task_b, ip_b) = ecs_with_workers(2)
    state.nodes = [ray_node("h", HEAD_IP, head=True), ray_node("node-a", ip_a), ray_node("node-b", ip_b)]
    state.replica_node, state.drains = "node-a", False
    op = scale_op(port, 1, drain_timeout_s=1)
    record_calls(op, state.events)

    with pytest.raises(ClusterError, match=rf"Ray did not finish draining node\(s\) node-b \({ip_b} on {task_b}\).*"
                                           "capacity was not changed"):
        op.execute({})

    assert changes(state.events) == [("drain", ["node-b"])]  # nothing resized, nothing stopped
    ecs = boto3.client("ecs")
    assert {t["desiredStatus"] for t in ecs.describe_tasks(cluster="ray", tasks=[task_a, task_b])["tasks"]} == {"RUNNING"}
    assert ecs.describe_services(cluster="ray", services=["ray-worker"])["services"][0]["desiredCount"] == 2


@pytest.mark.parametrize("workers", [2, 3])
def test_scale_out_and_the_same_count_resize_as_before_without_a_drain(
        aws: str, head: tuple[Head, int], workers: int) -> None:
    state, port = head
    (_, ip_a), (_, ip_b) = ecs_with_workers(2)
    state.nodes = [ray_node("h", HEAD_IP, head=True), ray_node("node-a", ip_a), ray_node("node-b", ip_b)]
    op = scale_op(port, workers)
    record_calls(op, state.events)

    op.execute({})

    assert changes(state.events) == [("UpdateService", {"service": "ray-head", "desiredCount": 1}),
                                      ("UpdateService", {"service": "ray-worker", "desiredCount": workers})]


def test_the_deferred_drain_resumes_from_its_serialized_trigger_and_plan(aws: str, head: tuple[Head, int]) -> None:
    """Deferrable: the triggerer gets the drain's wait (rebuilt from ``serialize()``, as Airflow does), the worker
    resumes with the plan from the deferral's kwargs and stops only the drained task."""
    import importlib

    from airflow.exceptions import TaskDeferred

    state, port = head
    (task_a, ip_a), (task_b, ip_b) = ecs_with_workers(2)
    state.nodes = [ray_node("h", HEAD_IP, head=True), ray_node("node-a", ip_a), ray_node("node-b", ip_b)]
    state.replica_node = "node-a"
    op = ScaleClusterOperator(task_id="scale", workers=1, target="ecs", deferrable=True, target_options={
        "cluster": "ray", "bucket": "b", "head_address": "127.0.0.1", "dashboard_port": port})
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    path, kwargs = deferred.value.trigger.serialize()
    module, name = path.rsplit(".", 1)
    trigger = getattr(importlib.import_module(module), name)(**json.loads(json.dumps(kwargs)))
    assert (path, trigger.node_ids) == ("raylift.triggers.drain.RayNodesDrainedTrigger", ["node-b"])
    event = trigger.wait()
    assert event["status"] == "success" and event["nodes"]["node-b"]["state"] == "DEAD"

    resumed = ScaleClusterOperator(task_id="scale", workers=1, target="ecs", deferrable=True, target_options={
        "cluster": "ray", "bucket": "b", "head_address": "127.0.0.1", "dashboard_port": port})
    resumed.execute_complete({}, event, **json.loads(json.dumps(deferred.value.kwargs)))
    tasks = boto3.client("ecs").describe_tasks(cluster="ray", tasks=[task_a, task_b])["tasks"]
    assert {t["taskArn"]: t["desiredStatus"] for t in tasks} == {task_a: "RUNNING", task_b: "STOPPED"}
