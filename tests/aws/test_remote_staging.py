"""Staging off the Airflow worker: on ``ecs`` a one-off ECS task, on ``eks`` a Kubernetes Job copies the model; the
operator defers, then returns the same StagedModel XCom as in-worker staging.

Oracles: moto (the RunTask ECS recorded: task definition, overrides, placement), the Kubernetes stand-in with the
``kubernetes`` client's ``V1Job`` model checking the Job as posted, and S3 (moto) for what the copy left. The
strongest check runs the very command the task/Job was given, as a subprocess of this environment against moto
(the container's role is moto's test credentials; only the scratch mount point differs), then resumes the operator
with the event its trigger fires.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from airflow.providers.common.compat.sdk import TaskDeferred

from raylift.errors import RayliftValueError, StagingError
from raylift.manifest import MANIFEST_NAME
from raylift.operators.stage import StageModelOperator
from tests.aws.moto_resources import ecs_cluster
from tests.fixtures.kube_jobs import KubeJobsStandIn, kube_jobs, v1job_problems  # noqa: F401 - fixture

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "raylift-models"
SOURCE_BUCKET = "hub-mirror"
SOURCE = f"s3://{SOURCE_BUCKET}/tiny"
MODEL_FILES = {"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\x00" * 4096}
STAGING_IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/raylift-airflow:test"


class XComs(dict):  # type: ignore[type-arg]
    """What the task pushed, by (task id, key), as Airflow keeps it between execute and execute_complete."""

    def context(self, task_id: str = "stage_model") -> dict[str, Any]:
        xcoms = self

        class TI:
            try_number = 1

            def xcom_push(self, key: str, value: Any) -> None:
                xcoms[(task_id, key)] = value

            def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
                return xcoms.get((task_ids, key))

        return {"run_id": "manual__1", "ti": TI(), "params": {}}


@pytest.fixture()
def buckets(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The model bucket and a source bucket holding a tiny model (what a hub mirror in S3 looks like)."""
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    s3 = boto3.client("s3")
    for name in (BUCKET, SOURCE_BUCKET):
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    for name, body in MODEL_FILES.items():
        s3.put_object(Bucket=SOURCE_BUCKET, Key=f"tiny/{name}", Body=body)
    return aws


def model_bucket_keys() -> list[str]:
    return sorted(o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=BUCKET).get("Contents", []))


def run_as_the_container(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The task's/Job's command, run here: ``python`` is this environment's (the image's has raylift too) and the
    scratch volume's mount point is a temporary folder; every other argument is as given. Credentials: the moto
    environment, standing in for the task role / Pod Identity (none is in the command)."""
    assert command[:3] == ["python", "-m", "raylift.aws.staging_job"], command
    argv = [sys.executable, *command[1:]]
    argv[argv.index("--cache-dir") + 1] = str(tmp_path / "scratch")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "plugins")}
    env.pop("AIRFLOW_CONN_AWS_DEFAULT", None)  # the container has no Airflow connection: the default chain only
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def check_staged(xcom: dict[str, Any], record: dict[str, Any]) -> None:
    """The XCom is the record the copy wrote, and it names what is in S3."""
    assert xcom == record
    assert xcom["uri"].startswith(f"s3://{BUCKET}/models/tiny/s3/sha256-")  # an s3:// source's revision is "s3"
    assert set(xcom["files"]) == set(MODEL_FILES) and xcom["copied_files"] == 2
    prefix = xcom["uri"].removeprefix(f"s3://{BUCKET}/")
    assert {f"{prefix}/{name}" for name in [*MODEL_FILES, MANIFEST_NAME]} <= set(model_bucket_keys())
    manifest = json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key=f"{prefix}/{MANIFEST_NAME}")["Body"].read())
    assert manifest["complete"] is True and manifest["files"] == xcom["files"]


def read_record(key: str) -> dict[str, Any]:
    return json.loads(boto3.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read())


def first_event(trigger: Any) -> dict[str, Any]:
    async def run() -> dict[str, Any]:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(run())


# -- ECS --------------------------------------------------------------------------------------------------------
ECS_OPTIONS = {"bucket": BUCKET, "cluster": "ray", "head_address": "10.0.0.1", "region_name": "us-west-2"}


def ecs_staging_stack() -> None:
    """The cluster and the staging task definition as terraform's staging.tf makes them, but EC2-launched: moto
    cannot run an awsvpc (Fargate) task (its ENI lacks private_dns_name), so the network path is checked apart."""
    ecs_cluster("ray", {"ray-head": 0, "ray-worker": 0})
    boto3.client("ecs").register_task_definition(
        family="raylift-model-staging", requiresCompatibilities=["EC2"],
        containerDefinitions=[{"name": "stage", "image": STAGING_IMAGE, "memory": 512, "essential": True,
                               "entryPoint": ["/usr/bin/dumb-init", "--"],
                               "command": ["python", "-m", "raylift.aws.staging_job", "--help"]}],
    )
    ec2, ecs = boto3.client("ec2"), boto3.client("ecs")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="m5.xlarge")["Instances"][0]
    document = {"instanceId": instance["InstanceId"], "instanceType": "m5.xlarge", "region": "us-west-2"}
    ecs.register_container_instance(cluster="ray", instanceIdentityDocument=json.dumps(document))


def stage_op(target: str, options: dict[str, Any], **kwargs: Any) -> StageModelOperator:
    return StageModelOperator(task_id="stage_model", target=target, target_options=options, model_source=SOURCE,
                              model_id="tiny", revision="main", **kwargs)


def test_ecs_stages_in_a_one_off_task_and_returns_the_record_it_wrote(buckets: str, tmp_path: Path) -> None:
    ecs_staging_stack()
    xcoms = XComs()
    op = stage_op("ecs", ECS_OPTIONS, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(xcoms.context())
    assert model_bucket_keys() == []  # nothing was copied by the Airflow task itself

    # what ECS was asked to run (moto's record of the RunTask)
    ecs = boto3.client("ecs")
    [arn] = ecs.list_tasks(cluster="ray")["taskArns"]
    task = ecs.describe_tasks(cluster="ray", tasks=[arn])["tasks"][0]
    assert task["taskDefinitionArn"].endswith(":task-definition/raylift-model-staging:1")
    assert task["startedBy"] == "raylift-staging"
    [override] = task["overrides"]["containerOverrides"]
    command = override["command"]
    assert override["name"] == "stage" and "environment" not in override
    args = dict(zip(command[3::2], command[4::2]))
    assert args["--source"] == SOURCE and args["--model-id"] == "tiny" and args["--bucket"] == BUCKET
    assert args["--prefix"] == "models" and args["--revision"] == "main"
    assert not {os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_ACCESS_KEY_ID"]} & set(command)
    trigger = deferred.value.trigger
    assert type(trigger).__name__ == "EcsStagingTaskTrigger" and trigger.task_arn == arn

    # the container runs, then ECS stops the task
    done = run_as_the_container(command, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    ecs.stop_task(cluster="ray", task=arn, reason="Essential container in task exited")

    event = first_event(trigger)
    assert event["status"] == "success" and event["task_arn"] == arn
    xcom = op.execute_complete(xcoms.context(), event)
    check_staged(xcom, read_record(args["--record-key"]))


def test_ecs_task_that_stopped_without_its_record_fails_the_step_with_what_to_do(buckets: str) -> None:
    ecs_staging_stack()
    xcoms = XComs()
    op = stage_op("ecs", ECS_OPTIONS, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(xcoms.context())
    ecs = boto3.client("ecs")
    [arn] = ecs.list_tasks(cluster="ray")["taskArns"]
    ecs.stop_task(cluster="ray", task=arn, reason="Task stopped by user")  # the container never finished
    event = first_event(deferred.value.trigger)
    with pytest.raises(StagingError, match=r"Task stopped by user.*without writing its record.*run the step again"):
        op.execute_complete(xcoms.context(), event)
    # a container that exited non-zero fails the step with its exit code (moto reports none: the event ECS's
    # DescribeTasks gives the trigger, with the container's exit code)
    with pytest.raises(StagingError, match=rf"ECS staging task {re.escape(arn)} .*exited with code 3.*exit code 3: the source"):
        op.execute_complete(xcoms.context(), event | {"exit_code": 3})


def test_ecs_without_the_staging_task_definition_names_terraform_and_in_worker(buckets: str) -> None:
    ecs_cluster("ray", {"ray-head": 0, "ray-worker": 0})
    with pytest.raises(StagingError, match=r"no staging task definition 'raylift-model-staging'.*staging.tf.*in_worker"):
        stage_op("ecs", ECS_OPTIONS, deferrable=True).execute(XComs().context())


def test_awsvpc_staging_tasks_borrow_the_head_services_network_and_run_on_fargate(aws: str) -> None:
    from raylift.hooks.ecs_staging import run_task_kwargs

    definition = boto3.client("ecs").register_task_definition(
        family="raylift-model-staging", requiresCompatibilities=["FARGATE"], networkMode="awsvpc", cpu="4096",
        memory="16384", containerDefinitions=[{"name": "stage", "image": STAGING_IMAGE}],
        ephemeralStorage={"sizeInGiB": 200},
    )["taskDefinition"]
    network = {"subnets": ["subnet-a"], "securityGroups": ["sg-ray"], "assignPublicIp": "DISABLED"}
    service = {"serviceName": "ray-head", "networkConfiguration": {"awsvpcConfiguration": network}}
    kwargs = run_task_kwargs(cluster="ray", task_definition=definition, container="stage", command=["python"],
                             head_service=service, tags={})
    assert kwargs["launchType"] == "FARGATE"
    assert kwargs["networkConfiguration"] == {"awsvpcConfiguration": network}
    with pytest.raises(StagingError, match="no awsvpc configuration"):
        run_task_kwargs(cluster="ray", task_definition=definition, container="stage", command=["python"],
                        head_service={"serviceName": "ray-head"}, tags={})
    with pytest.raises(StagingError, match=r"has no container 'stager'.*staging_container"):
        run_task_kwargs(cluster="ray", task_definition=definition, container="stager", command=["python"],
                        head_service=service, tags={})


def test_in_worker_keeps_the_copy_in_the_airflow_task(buckets: str) -> None:
    ecs_staging_stack()
    xcom = stage_op("ecs", {**ECS_OPTIONS, "staging": "in_worker"}, deferrable=True).execute(XComs().context())
    assert boto3.client("ecs").list_tasks(cluster="ray")["taskArns"] == []
    assert xcom["copied_files"] == 2 and xcom["uri"].startswith(f"s3://{BUCKET}/models/tiny/s3/sha256-")  # an s3:// source's revision is "s3"


def test_unknown_staging_mode_is_refused_with_the_choices() -> None:
    from raylift.targets import resolve_target

    with pytest.raises(RayliftValueError, match=r"'staging' got 'sideways': use one of \['remote', 'in_worker'\]"):
        resolve_target("ecs", {**ECS_OPTIONS, "staging": "sideways"}, None)


@pytest.mark.parametrize("source", ["/models/tiny", "file:///models/tiny", "https://example.com/m.tar.gz?X-Amz-Signature=abc"])
def test_sources_the_task_cannot_or_must_not_see_are_refused_before_anything_starts(buckets: str, source: str) -> None:
    ecs_staging_stack()
    op = StageModelOperator(task_id="stage_model", target="ecs", target_options=ECS_OPTIONS, model_source=source,
                            model_id="tiny")
    with pytest.raises(RayliftValueError, match="in_worker") as refused:
        op.execute(XComs().context())
    assert "abc" not in str(refused.value)
    assert boto3.client("ecs").list_tasks(cluster="ray")["taskArns"] == []


# -- EKS --------------------------------------------------------------------------------------------------------
EKS_OPTIONS = {"bucket": BUCKET, "cluster_name": "ray", "worker_nodegroup": "gpu", "region_name": "us-west-2",
               "kubernetes_conn_id": "kubernetes_default", "staging_image": STAGING_IMAGE}


def test_eks_stages_in_a_job_and_returns_the_record_it_wrote(buckets: str, kube_jobs: KubeJobsStandIn,  # noqa: F811
                                                             tmp_path: Path) -> None:
    xcoms = XComs()
    op = stage_op("eks", EKS_OPTIONS, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(xcoms.context())
    assert model_bucket_keys() == []

    [job] = kube_jobs.posted
    assert v1job_problems(job) == ""  # the kubernetes client's V1Job takes every field as posted
    name = job["metadata"]["name"]
    assert kube_jobs.jobs[("raylift", name)]  # created (a 422 from the oracle would have failed execute)
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "raylift-model-staging" and pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [{"name": "scratch", "emptyDir": {"sizeLimit": "200Gi"}}]
    [container] = pod["containers"]
    assert container["image"] == STAGING_IMAGE
    command = container["command"]
    assert container["volumeMounts"] == [{"name": "scratch", "mountPath": command[command.index("--cache-dir") + 1]}]
    assert [e for e in container["env"] if "value" in e] == [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    args = dict(zip(command[3::2], command[4::2]))
    assert args["--source"] == SOURCE and args["--bucket"] == BUCKET and args["--model-id"] == "tiny"
    trigger = deferred.value.trigger
    assert (trigger.name, trigger.namespace) == (name, "raylift")

    done = run_as_the_container(command, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    kube_jobs.finish("raylift", name, exit_code=0)

    event = first_event(trigger)
    assert event["status"] == "success"
    check_staged(op.execute_complete(xcoms.context(), event), read_record(args["--record-key"]))


def test_eks_failed_job_fails_the_step_with_its_exit_code(buckets: str, kube_jobs: KubeJobsStandIn) -> None:  # noqa: F811
    xcoms = XComs()
    op = stage_op("eks", EKS_OPTIONS, deferrable=True)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(xcoms.context())
    [(namespace, name)] = kube_jobs.jobs
    kube_jobs.finish(namespace, name, exit_code=3)  # the stager refused the source; the backoff limit is reached
    trigger = deferred.value.trigger
    event = first_event(trigger)
    waited = trigger.wait()  # the in-process wait (deferrable=False) reads the same
    assert {k: v for k, v in waited.items() if k != "seen_at"} == {k: v for k, v in event.items() if k != "seen_at"}
    assert event["status"] == "failed" and event["exit_code"] == 3
    with pytest.raises(StagingError, match=rf"BackoffLimitExceeded.*exit code 3.*kubectl logs job/{name}"):
        op.execute_complete(xcoms.context(), event)
    assert model_bucket_keys() == []


def test_the_job_oracle_refuses_what_the_api_would() -> None:
    """The stand-in's check has teeth: a misspelt field and a container without a name are refused."""
    from raylift.staging.k8s_job import render_staging_job

    job = render_staging_job(name="raylift-stage-x", namespace="raylift", image=STAGING_IMAGE, command=["python"],
                             service_account="sa", scratch_size="1Gi", cache_dir="/scratch", deadline_s=60)
    assert v1job_problems(job) == ""
    container = job["spec"]["template"]["spec"]["containers"][0]
    container["volumeMount"] = container.pop("volumeMounts")
    assert "dropped" in v1job_problems(job)
    del container["name"]
    assert "refuses" in v1job_problems(job)


def test_eks_without_a_staging_image_says_which_option(buckets: str, kube_jobs: KubeJobsStandIn) -> None:  # noqa: F811
    options = {k: v for k, v in EKS_OPTIONS.items() if k != "staging_image"}
    with pytest.raises(RayliftValueError, match="'staging_image'.*images/airflow.*in_worker"):
        stage_op("eks", options, deferrable=True).execute(XComs().context())
    assert kube_jobs.posted == []


def test_triggers_round_trip_through_their_serialization() -> None:
    from raylift.triggers.ecs_staging import EcsStagingTaskTrigger
    from raylift.triggers.kube_job import KubeJobDoneTrigger

    for trigger in (
        EcsStagingTaskTrigger("ray", "arn:aws:ecs:us-west-2:1:task/ray/abc", "stage", waiter_delay=5,
                              waiter_max_attempts=7, region_name="us-west-2"),
        KubeJobDoneTrigger("raylift-stage-x", "raylift", None, timeout_s=60, poll_interval_s=2,
                           cluster_context={"eks_cluster_name": "ray", "region": "us-west-2", "aws_conn_id": None}),
    ):
        path, kwargs = trigger.serialize()
        module, _, name = path.rpartition(".")
        import importlib

        again = getattr(importlib.import_module(module), name)(**kwargs)
        assert again.serialize() == (path, kwargs)
