"""The ECS first hour as AWS behaves (issue 55, ECS items 1-3), against moto and stand-ins on 127.0.0.1.

- The documented first deploy (task definitions on ``<repo>:latest``, the default ``release: canary``) on a cluster
  that serves no app is not blue/green: the scale step rolls the image in place and the plan is direct.
- The user endpoint's Cloud Map instance follows the serving head: after a teardown and a scale-up, a direct
  (in-place) rollout, and ECS replacing a head task. Cloud Map as AWS defines it (API Reference, RegisterInstance:
  "If the specified instance ID already exists, AWS Cloud Map updates it"; DeregisterInstance deletes the records);
  moto 5.2.5 (``moto/servicediscovery/models.py``, ``register_instance``) appends a registration instead, so the
  test reads the last one per instance id, as ``tests/aws/test_ecs_blue_green.endpoint`` does. ECS's scheduler, which
  moto leaves to the test, stops a service's tasks when its desiredCount is lowered and starts new ones (new IPs) as
  AWS's service scheduler does (ECS Developer Guide, "Amazon ECS services").
- A dashboard that takes no connection while ECS runs the head task fails the ready check at once with the
  security group named, not after the sensor's timeout.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from raylift.errors import ClusterError
from raylift.release.plan import plan_release, replaced_in_place
from raylift.targets.ecs import DashboardUnreachableError, EcsTarget
from tests.aws.standins import Proxy
from tests.aws.test_ecs_blue_green import Direct, changes, direct, endpoint, services, stack, target
from tests.fixtures.http_standin import JsonHandler, serve_http

__all__ = ["direct"]  # the fixture, imported to be used here


@pytest.fixture()
def empty_head() -> Iterator[int]:
    """A Ray head's dashboard that runs no Serve app (a first deploy, or one after a teardown)."""

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path == "/api/version":
                self._json({"version": "4", "ray_version": "2.60.0"})
            elif self.path.startswith("/api/serve/applications/"):
                self._json({"applications": {}})
            else:
                self.send_error(404)

    with serve_http(Handler) as port:
        yield port


def head_in_cloud_map(direct: Direct, ip: str = "127.0.0.1") -> None:
    """ECS's registration of the head task in the head's Cloud Map service (service registries)."""
    sd = direct("servicediscovery")
    head = next(s["Id"] for s in sd.list_services()["Services"] if s["Name"] == "head")
    sd.register_instance(ServiceId=head, InstanceId="head-task", Attributes={"AWS_INSTANCE_IPV4": ip})


def no_host_prefix(proxy: Proxy, monkeypatch: pytest.MonkeyPatch) -> None:
    conn = json.loads(proxy.conn_json())  # Cloud Map's DiscoverInstances: no "data-" host prefix before moto
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(
        conn | {"extra": conn["extra"] | {"config_kwargs": {"inject_host_prefix": False}}}))  # fmt: skip


def scheduler(direct: Direct, service: str) -> str | None:
    """ECS's service scheduler, which moto leaves to the test: the service's running tasks stopped, and, when it
    desires one, a new task on its current revision started (a new ENI, a new IP). Returns that IP."""
    ecs = direct("ecs")
    for arn in ecs.list_tasks(cluster="ray", serviceName=service, desiredStatus="RUNNING")["taskArns"]:
        ecs.stop_task(cluster="ray", task=arn, reason="replaced by the service scheduler")
    found = ecs.describe_services(cluster="ray", services=[service])["services"][0]
    if not found["desiredCount"]:
        return None
    task = ecs.run_task(cluster="ray", taskDefinition=found["taskDefinition"], group=f"service:{service}",
                        networkConfiguration=found["networkConfiguration"], launchType="FARGATE")["tasks"][0]  # fmt: skip
    return str(next(d["value"] for a in task["attachments"] for d in a["details"] if d["name"] == "privateIPv4Address"))


# -- item 1: the first deploy ------------------------------------------------------------------------------------
@pytest.mark.parametrize("head_running", [True, False], ids=["head-up-no-app", "after-teardown"])
def test_the_documented_first_deploy_is_planned_direct_with_the_image_rolled_in_place(
    s3_proxy: Proxy, direct: Direct, empty_head: int, monkeypatch: pytest.MonkeyPatch, head_running: bool
) -> None:
    repo = stack(direct)  # terraform's task definitions: <repo>:latest
    if not head_running:
        for name in ("ray-head", "ray-worker"):
            direct("ecs").update_service(cluster="ray", service=name, desiredCount=0)
    head_in_cloud_map(direct)
    image = f"{repo}@sha256:" + "a" * 64
    monkeypatch.setattr(EcsTarget, "image_reference", lambda self: image)
    no_host_prefix(s3_proxy, monkeypatch)
    t = target(roll_out_image=True, dashboard_port=empty_head)

    assert t.cluster_change() is None  # nothing serves: nothing to protect, so no new cluster beside it
    t.cluster_change_in_place = replaced_in_place("canary")  # the scale step of the default release
    t.scale(workers=2)
    assert [c for c in changes(s3_proxy) if c[0] == "RegisterTaskDefinition"] == [
        ("RegisterTaskDefinition", "ray-head"), ("RegisterTaskDefinition", "ray-worker")]  # rolled in place
    for name, found in services(direct, "ray-head", "ray-worker").items():
        td = direct("ecs").describe_task_definition(taskDefinition=found["taskDefinition"])["taskDefinition"]
        assert td["containerDefinitions"][0]["image"] == image, name
    change = t.cluster_change()
    plan = plan_release(None, "llm", None, {"name": "llm", "import_path": "llm:app"}, cluster_change=change)
    assert (change, plan.kind) == (None, "direct"), plan.why
    assert [c for c in changes(s3_proxy) if c[0] == "CreateService"] == []  # no second head


# -- item 2: the endpoint follows the serving head ---------------------------------------------------------------
def test_the_endpoint_follows_the_serving_head_through_teardown_rollout_and_replacement(
    s3_proxy: Proxy, direct: Direct, empty_head: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = stack(direct)
    head_in_cloud_map(direct)
    no_host_prefix(s3_proxy, monkeypatch)
    t = target(dashboard_port=empty_head)
    first = scheduler(direct, "ray-head")
    t.ensure_endpoint()  # the ready check of the first run
    assert endpoint(direct) == [first]
    t.ensure_endpoint()  # the same head: nothing more
    assert [c for c in changes(s3_proxy) if c[0] == "RegisterInstance"] == [("RegisterInstance", "raylift-endpoint")]

    t.teardown()
    assert scheduler(direct, "ray-head") is None
    assert endpoint(direct) == []  # the name answers nothing rather than a head that is gone

    t.scale(workers=2)
    after_scale_up = scheduler(direct, "ray-head")
    t.ensure_endpoint()
    assert endpoint(direct) == [after_scale_up] != [first]

    image = f"{repo}@sha256:" + "b" * 64
    monkeypatch.setattr(EcsTarget, "image_reference", lambda self: image)
    t.roll_out_image()  # release: direct, the services rolled in place: a new head task
    rolled = scheduler(direct, "ray-head")
    t.ensure_endpoint()
    assert endpoint(direct) == [rolled] != [after_scale_up]

    replaced = scheduler(direct, "ray-head")  # the head task died; ECS started another
    t.ensure_endpoint()
    assert endpoint(direct) == [replaced] != [rolled]


# -- item 3: an unreachable dashboard ------------------------------------------------------------------------------
@pytest.fixture()
def closed_port() -> int:
    """A 127.0.0.1 port nothing listens on: a connection to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_dashboard_fails_fast_naming_the_security_group(
    s3_proxy: Proxy, direct: Direct, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from raylift.records import ClusterExpectation

    stack(direct)  # ECS runs the head task (running = desired in moto)
    head_in_cloud_map(direct)
    no_host_prefix(s3_proxy, monkeypatch)
    want = ClusterExpectation(nodes=3, resources={})

    waiting = target(dashboard_port=closed_port, dashboard_connect_grace_s=30)
    with pytest.raises(ClusterError):  # within the grace: not ready yet, the sensor pokes again
        waiting.check_ready(want)

    t = target(dashboard_port=closed_port, dashboard_connect_grace_s=0)
    started = time.monotonic()
    with pytest.raises(DashboardUnreachableError) as failed:
        t.check_ready(want)
    assert time.monotonic() - started < 30
    assert not isinstance(failed.value, ClusterError)  # RayClusterReadySensor.poke waits out ClusterError only
    message = str(failed.value)
    for named in ("airflow_security_group_ids", "control_plane_security_group_ids", f"127.0.0.1:{closed_port}",
                  "connection refused", "ray-head"):
        assert named in message, message


def test_a_head_that_ecs_does_not_run_is_not_called_unreachable(
    s3_proxy: Proxy, direct: Direct, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raylift.records import ClusterExpectation

    stack(direct)
    for name in ("ray-head", "ray-worker"):
        direct("ecs").update_service(cluster="ray", service=name, desiredCount=0)
    head_in_cloud_map(direct)
    no_host_prefix(s3_proxy, monkeypatch)
    with pytest.raises(ClusterError):
        target(dashboard_port=closed_port, dashboard_connect_grace_s=0).check_ready(ClusterExpectation(nodes=1))


