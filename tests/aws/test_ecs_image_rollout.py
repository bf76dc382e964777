"""ECS image rollout against moto: a new image is a new task-definition revision and a new deployment, and a rollback
puts the services back on the revisions they ran before.

What is asserted is moto's own record (DescribeServices, DescribeTaskDefinition, ListTaskDefinitions) and the
UpdateService requests raylift sent (seen by a proxy in front of moto), never a patched method's answer. The Ray
head is a dashboard stand-in on 127.0.0.1 that keeps what is PUT, as a head does, and forgets it on a restart.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from raylift.aws.content import image_content_digest, image_tag
from raylift.errors import ClusterError
from raylift.lease import Lease
from raylift.targets import get_target
from raylift.targets.ecs import EcsTarget
from tests.aws.standins import Proxy
from tests.fixtures.http_standin import JsonHandler, serve_http

BUCKET = "raylift-models"
REPO = "ray-vllm"
ROLE = "arn:aws:iam::123456789012:role/raylift-task"
SERVICES = ("ray-head", "ray-worker")
UPDATE_SERVICE = "AmazonEC2ContainerServiceV20141113.UpdateService"


class Head:
    """The Ray head's Serve state as its dashboard shows it: the config last PUT, gone when ECS replaces the head
    task, which it does when the head service moves to another task-definition revision (moto's record)."""

    def __init__(self) -> None:
        self.port = 0
        self.applications: dict[str, Any] = {}
        self.puts: list[dict[str, Any]] = []
        self.revision: str | None = None  # the head service's task definition when last looked at

    def follow_ecs(self) -> None:
        reply = boto3.client("ecs").describe_services(cluster="ray", services=["ray-head"])
        revision = reply["services"][0]["taskDefinition"] if reply["services"] else None
        if self.revision is not None and revision != self.revision:
            self.restart()
        self.revision = revision

    def serve(self, config: dict[str, Any]) -> None:
        self.applications = {a["name"]: {"status": "RUNNING", "deployed_app_config": a}
                             for a in config["applications"]}  # fmt: skip

    def restart(self) -> None:
        """A new head task (a new revision's): Serve starts with no app."""
        self.applications = {}


HEAD = Head()


@pytest.fixture(autouse=True)
def head() -> Iterator[Head]:
    """Every target here points at this stand-in, never at whatever may listen on the default dashboard port."""
    global HEAD
    state = HEAD = Head()

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/api/serve/applications/"):
                state.follow_ecs()
                self._json({"applications": state.applications})
            elif self.path == "/api/version":
                self._json({"version": "4", "ray_version": "2.60.0"})
            else:
                self.send_error(404)

        def do_PUT(self) -> None:
            config = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.puts.append(config)
            state.serve(config)
            self._json({})

    with serve_http(Handler) as port:
        state.port = port
        yield state


def push(repo: str, tag: str, content: str) -> str:
    """Push a manifest unique to ``content`` as ``repo:tag``; returns the image digest ECR gives it."""
    digest = "sha256:" + hashlib.sha256(content.encode()).hexdigest()
    layer = {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 7, "digest": digest}
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 7, "digest": digest},
        "layers": [layer],  # moto's image digest is made of the layers' digests
    }
    reply = boto3.client("ecr").put_image(repositoryName=repo, imageManifest=json.dumps(manifest), imageTag=tag)
    return str(reply["image"]["imageId"]["imageDigest"])


def content_tag(root: Path) -> str:
    return image_tag(image_content_digest(root, "ray-vllm-gpu"))


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
def stack(s3_proxy: Proxy, checkout: Path) -> str:
    """What the terraform ECS example creates: head and worker task definitions (one family each, running the
    repository's moving tag, with a role, sizes and tags), their services, the model bucket, the repository with
    the moving tag on an older image. Returns the repository URI."""
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    repo = boto3.client("ecr").create_repository(repositoryName=REPO)["repository"]["repositoryUri"]
    push(REPO, "latest", "an older image")
    ecs = boto3.client("ecs")
    ecs.create_cluster(clusterName="ray")
    for role in ("head", "worker"):
        ecs.register_task_definition(
            family=f"ray-{role}",
            taskRoleArn=ROLE,
            networkMode="awsvpc",
            requiresCompatibilities=["EC2"],
            cpu="4096",
            memory="16384",
            containerDefinitions=[
                {"name": f"ray_{role}", "image": f"{repo}:latest", "memory": 512, "essential": True,
                 "command": [f"ray start --{role}"]},
                {"name": "log-router", "image": "public.ecr.aws/aws-observability/aws-for-fluent-bit:2.32", "memory": 64},
            ],
            tags=[{"key": "stack", "value": "raylift"}],
        )  # fmt: skip
        ecs.create_service(cluster="ray", serviceName=f"ray-{role}", taskDefinition=f"ray-{role}", desiredCount=0)
    return str(repo)


def target(**extra: Any) -> EcsTarget:
    options = {"cluster": "ray", "bucket": BUCKET, "head_address": "127.0.0.1", "dashboard_port": HEAD.port,
               "image_tag": "latest", "scale_poll_interval_s": 0.05, "scale_timeout_s": 5} | extra  # fmt: skip
    t = get_target("ecs", **json.loads(json.dumps(options)))  # options are plain JSON, as the DAG passes them
    assert isinstance(t, EcsTarget)
    return t


def as_release(t: EcsTarget, run: str) -> EcsTarget:
    """``t`` acting for a release of ``raylift_deploy`` (its writer lease's holder names it)."""
    t.held_lease = Lease(1, f"raylift_deploy/{run}", time.time() + 600)
    return t


def services() -> dict[str, dict[str, Any]]:
    reply = boto3.client("ecs").describe_services(cluster="ray", services=list(SERVICES))
    return {s["serviceName"]: s for s in reply["services"]}


def revision(family: str, number: int) -> dict[str, Any]:
    return dict(boto3.client("ecs").describe_task_definition(taskDefinition=f"{family}:{number}")["taskDefinition"])


def revisions(family: str) -> list[str]:
    return [a.rsplit(":", 1)[1] for a in boto3.client("ecs").list_task_definitions(familyPrefix=family)["taskDefinitionArns"]]


def update_requests(proxy: Proxy) -> list[dict[str, Any]]:
    return [json.loads(body) for target_name, body in proxy.bodies if target_name == UPDATE_SERVICE]


def first_event(trigger: Any) -> dict[str, Any]:
    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    return asyncio.run(asyncio.wait_for(first(), timeout=30))


def test_a_new_image_is_a_new_revision_and_deployment_and_rollback_returns(
    stack: str, checkout: Path, s3_proxy: Proxy
) -> None:
    repo = stack
    first = push(REPO, content_tag(checkout), "image one")
    before = {name: s["deployments"][0]["id"] for name, s in services().items()}

    run1 = as_release(target(), "run-1")
    want = run1.scale(workers=2)
    assert want.nodes == 3
    # moto's record: a revision 2 of each family, running the build's image by digest, all else as it was
    for role in ("head", "worker"):
        assert revisions(f"ray-{role}") == ["1", "2"]
        new, old = revision(f"ray-{role}", 2), revision(f"ray-{role}", 1)
        assert new["containerDefinitions"][0]["image"] == f"{repo}@{first}"
        assert new["containerDefinitions"][1] == old["containerDefinitions"][1]  # the sidecar is not raylift's
        assert new["containerDefinitions"][0]["command"] == [f"ray start --{role}"]
        assert (new["taskRoleArn"], new["cpu"], new["memory"], new["networkMode"]) == (ROLE, "4096", "16384", "awsvpc")
        tags = boto3.client("ecs").describe_task_definition(taskDefinition=f"ray-{role}:2", include=["TAGS"])["tags"]
        assert tags == [{"key": "stack", "value": "raylift"}]
    # ... and each service on it, through a new deployment (moto gives a forced deployment a new id)
    now = services()
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in now.items()} == {
        "ray-head": "ray-head:2", "ray-worker": "ray-worker:2"}  # fmt: skip
    assert all(now[n]["deployments"][0]["id"] != before[n] for n in SERVICES)
    sent = [(r["service"], r.get("taskDefinition", "").rsplit("/", 1)[-1], r.get("forceNewDeployment")) for r in
            update_requests(s3_proxy) if "taskDefinition" in r]  # fmt: skip
    assert sorted(sent) == [("ray-head", "ray-head:2", True), ("ray-worker", "ray-worker:2", True)]
    assert {n: s["desiredCount"] for n, s in now.items()} == {"ray-head": 1, "ray-worker": 2}

    # the readiness wait is boto's services_stable, deferred: one deployment each, at its desired count
    from raylift.triggers.ecs import EcsServicesStableTrigger

    trigger = run1.scale_trigger()
    assert isinstance(trigger, EcsServicesStableTrigger) and trigger.waiter_name == "services_stable"
    event = first_event(trigger)
    assert event["status"] == "success"
    assert {n: s["task_definition"].rsplit("/", 1)[1] for n, s in event["services"].items()} == {
        "ray-head": "ray-head:2", "ray-worker": "ray-worker:2"}  # fmt: skip

    # the same image again (a retried task, a redeploy of the same checkout): no revision, no deployment
    deployed = {n: s["deployments"][0]["id"] for n, s in services().items()}
    run1b = as_release(target(), "run-1b")
    run1b.scale(workers=2)
    assert revisions("ray-head") == ["1", "2"] and revisions("ray-worker") == ["1", "2"]
    assert {n: s["deployments"][0]["id"] for n, s in services().items()} == deployed

    # a redeploy with a new image: revision 3 and a new deployment; its rollback returns to revision 2
    (checkout / "images/ray-vllm-gpu/Dockerfile").write_text("FROM rayproject/ray:2.61.0-py311-gpu\n")
    second = push(REPO, content_tag(checkout), "image two")
    run2 = as_release(target(), "run-2")
    run2.scale(workers=2)
    assert revision("ray-head", 3)["containerDefinitions"][0]["image"] == f"{repo}@{second}"
    rolled = {n: s["deployments"][0]["id"] for n, s in services().items()}
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in services().items()} == {
        "ray-head": "ray-head:3", "ray-worker": "ray-worker:3"}  # fmt: skip
    assert all(rolled[n] != deployed[n] for n in SERVICES)

    message = run2.roll_back_image()
    assert "ray-head back on ray-head:2 from ray-head:3" in message, message
    back = services()
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in back.items()} == {
        "ray-head": "ray-head:2", "ray-worker": "ray-worker:2"}  # fmt: skip
    assert all(back[n]["deployments"][0]["id"] != rolled[n] for n in SERVICES)  # going back is a deployment too
    assert revision("ray-head", 2)["containerDefinitions"][0]["image"] == f"{repo}@{first}"
    assert revisions("ray-head") == ["1", "2", "3"]  # nothing deregistered: the rollback target stays usable

    # idempotent, and only the release's own rollout: run-2's rollback again, and a release that rolled nothing
    assert "ray-head already runs ray-head:2" in run2.roll_back_image()
    assert run1b.roll_back_image().startswith("nothing to roll back: release")
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in services().items()} == {
        "ray-head": "ray-head:2", "ray-worker": "ray-worker:2"}  # fmt: skip


def test_rollback_leaves_a_service_changed_since_alone(stack: str, checkout: Path) -> None:
    push(REPO, content_tag(checkout), "image one")
    t = as_release(target(), "run-1")
    record = t.roll_out_image()
    assert record is not None and sorted(record["services"]) == list(SERVICES)
    # someone moves the worker service to yet another revision (a hand deploy) after the release rolled it
    hand = boto3.client("ecs").register_task_definition(
        family="ray-worker", containerDefinitions=[{"name": "ray_worker", "image": f"{stack}:hand", "memory": 512}]
    )["taskDefinition"]["taskDefinitionArn"]
    boto3.client("ecs").update_service(cluster="ray", service="ray-worker", taskDefinition=hand)

    message = t.roll_back_image()
    assert "ray-worker left on ray-worker:3 (changed since release raylift_deploy/run-1" in message, message
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in services().items()} == {
        "ray-head": "ray-head:1", "ray-worker": "ray-worker:3"}  # fmt: skip


def test_refusals_say_what_to_do(stack: str, checkout: Path) -> None:
    t = target()
    with pytest.raises(ClusterError, match=r"ECR has no image .*:[0-9a-f]+ \(this checkout's content tag\).*"
                                           r"build_artifact pushes it before scale_cluster"):  # fmt: skip
        t.scale(workers=0)
    assert revisions("ray-head") == ["1"]  # nothing registered, no service touched

    push(REPO, content_tag(checkout), "image one")
    boto3.client("ecs").register_task_definition(
        family="ray-head", containerDefinitions=[{"name": "ray_head", "image": "rayproject/ray:2.60.0", "memory": 512}]
    )
    boto3.client("ecs").update_service(cluster="ray", service="ray-head", taskDefinition="ray-head:2")
    with pytest.raises(ClusterError, match=r"No container of ECS task definition .*ray-head:2 runs an image of .*"
                                           r"set the target option 'roll_out_image' to false"):  # fmt: skip
        t.scale(workers=0)
    # without image_tag, or with roll_out_image false, scale leaves task definitions alone (as before)
    untagged = target(image_tag=None)
    untagged.scale(workers=0)
    target(roll_out_image=False).scale(workers=0)
    assert revisions("ray-head") == ["1", "2"] and revisions("ray-worker") == ["1"]
    assert untagged.scale_trigger().serialize()[0] == "raylift.triggers.ecs.EcsServicesRunningTrigger"


def test_stable_wait_times_out_naming_the_unsettled_services(stack: str) -> None:
    from raylift.triggers.ecs import EcsServicesStableTrigger

    boto3.client("ecs").update_service(cluster="ray", service="ray-worker", desiredCount=2)
    # moto's create_service starts 0 of 1 tasks: the head is not stable until its count is met
    boto3.client("ecs").create_service(cluster="ray", serviceName="ray-head-2", taskDefinition="ray-head", desiredCount=1)
    event = first_event(EcsServicesStableTrigger("ray", ["ray-head-2", "ray-worker"], waiter_delay=0.05,
                                                 waiter_max_attempts=3))  # fmt: skip
    assert event["status"] == "timeout"
    assert "ray-head-2: 1 deployment(s), 0/1 running" in event["message"]
    assert "ray-worker" not in event["message"]

    with pytest.raises(ClusterError, match=r"not stable after 0s .*ray-head-2: 1 deployment\(s\), 0/1 running"):
        target()._ecs().wait_for_stable_services("ray", ["ray-head-2"], waiter_delay=0.01, waiter_max_attempts=2)
    event = first_event(EcsServicesStableTrigger("ray", ["ray-gone"], waiter_delay=0.05, waiter_max_attempts=3))
    assert event["status"] == "failed" and "has no service(s) ray-gone (MISSING)" in event["message"]


def test_the_head_restart_loses_no_serve_app_and_the_rollback_step_undoes_the_rollout(
    stack: str, checkout: Path, head: Head
) -> None:
    """A release that rolls out an image restarts the head, whose Serve apps are gone: the deploy's read-merge-write
    re-submits them with its own, and the DAG's rollback step (``undo_release``) puts the services back on their
    revisions and the config back on the head that started again."""
    from raylift.release.rollback import undo_release
    from raylift.release.state import DeploymentState
    from raylift.release.writer import cluster_lease, write_serve_config
    from raylift.serve.config import merge_app

    other = {"name": "translator", "import_path": "translator:app", "route_prefix": "/t"}
    llm = {"name": "llm", "import_path": "llm:build_app", "route_prefix": "/", "args": {"model": "s3://m/one"}}
    before = {"applications": [other, llm]}
    head.serve(before)  # what the cluster serves before the release
    push(REPO, content_tag(checkout), "image one")

    t = target()
    t.held_lease = cluster_lease(t).try_acquire("raylift_deploy/run-1", 600)  # acquire_cluster_lease's
    t.scale(workers=1)
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in services().items()} == {
        "ray-head": "ray-head:2", "ray-worker": "ray-worker:2"}  # fmt: skip
    assert t.image_rollout()["serve_config"] == before  # type: ignore[index]
    # ECS replaces the head task (the stand-in follows moto's head service): the new head serves nothing

    # the deploy step, as ServeDeployOperator does it: read, snapshot, merge its app, write through the writer
    state = DeploymentState(t.state_store(), t.cluster_key(), "llm")
    current = t.current_serve_config()
    assert head.applications == {}
    assert current == before, "the deploy would merge into an empty config and drop the other apps"
    candidate = {**llm, "args": {"model": "s3://m/two"}}
    config = merge_app(current, candidate, defaults={})
    state.begin_apply("run-1", current, config)
    write_serve_config(t, config, read=current)
    assert [a["name"] for a in head.puts[-1]["applications"]] == ["translator", "llm"]
    assert head.puts[-1]["applications"][0] == other  # re-submitted as it served before the release

    # the smoke test fails: the rollback step, on the same cluster, for the same release
    message = undo_release(t, state, "run-1", "llm")
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in services().items()} == {
        "ray-head": "ray-head:1", "ray-worker": "ray-worker:1"}, message  # fmt: skip
    assert "ray-head back on ray-head:1 from ray-head:2" in message, message
    # the head went back to its old revision, so it restarted again with no app: raylift re-applies what it served
    assert "re-applied the Serve config the head served before the release (apps ['translator', 'llm'])" in message
    assert head.puts[-1] == before
    assert "nothing to roll back: app 'llm' already runs the config that was serving before this run" in message

    # a retried rollback step changes nothing
    puts = len(head.puts)
    again = undo_release(t, state, "run-1", "llm")
    assert "ray-head already runs ray-head:1" in again and len(head.puts) == puts, again


def test_the_rollback_step_leaves_ecs_alone_when_the_release_rolled_out_nothing(
    stack: str, checkout: Path, head: Head
) -> None:
    from raylift.release.rollback import undo_release
    from raylift.release.state import DeploymentState
    from raylift.release.writer import cluster_lease

    t = target(image_tag=None)  # no rollout: scale leaves the task definitions as they are
    t.held_lease = cluster_lease(t).try_acquire("raylift_deploy/run-9", 600)
    t.scale(workers=1)
    message = undo_release(t, DeploymentState(t.state_store(), t.cluster_key(), "llm"), "run-9", "llm")
    assert message == "nothing to roll back: run run-9 applied no config for app 'llm'"
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in services().items()} == {
        "ray-head": "ray-head:1", "ray-worker": "ray-worker:1"}  # fmt: skip
    assert head.puts == []

    # a scale by hand (no release lease) that rolled an image out is no rollback step's to undo
    push(REPO, content_tag(checkout), "image one")
    target().scale(workers=1)
    assert target().undo_cluster_change() is None
    assert {n: s["taskDefinition"].rsplit("/", 1)[1] for n, s in services().items()} == {
        "ray-head": "ray-head:2", "ray-worker": "ray-worker:2"}  # fmt: skip
