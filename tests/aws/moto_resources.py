"""Create the AWS resources terraform would (in the moto server), for hook, trigger and target tests."""

from __future__ import annotations

import json
from typing import Any

import boto3

ROLE = "arn:aws:iam::123456789012:role/raylift"
REGION = "us-west-2"


def codebuild_project(name: str = "raylift-image") -> None:
    boto3.client("codebuild").create_project(
        name=name,
        source={"type": "S3", "location": "raylift-sources/raylift.zip", "buildspec": "images/buildspec.yml"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={"type": "LINUX_CONTAINER", "image": "aws/codebuild/standard:7.0", "computeType": "BUILD_GENERAL1_LARGE"},
        serviceRole=ROLE,
    )


def ecr_repository(name: str = "ray-vllm", tags: tuple[str, ...] = ()) -> str:
    ecr = boto3.client("ecr")
    uri = ecr.create_repository(repositoryName=name)["repository"]["repositoryUri"]
    for tag in tags:
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": 7, "digest": "sha256:" + "a" * 64},
            "layers": [],
        }
        ecr.put_image(repositoryName=name, imageManifest=json.dumps(manifest), imageTag=tag)
    return uri


def ecs_cluster(cluster: str = "ray", services: dict[str, int] | None = None) -> None:
    ecs = boto3.client("ecs")
    ecs.create_cluster(clusterName=cluster)
    ecs.register_task_definition(
        family="ray", containerDefinitions=[{"name": "ray", "image": "ray:2.60.0", "memory": 512}]
    )
    for name, desired in (services or {"ray-head": 0, "ray-worker": 0}).items():
        ecs.create_service(cluster=cluster, serviceName=name, taskDefinition="ray", desiredCount=desired)


def eks_nodegroups(cluster: str = "ray", groups: dict[str, dict[str, Any]] | None = None) -> None:
    eks = boto3.client("eks")
    ec2 = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    eks.create_cluster(name=cluster, roleArn=ROLE, resourcesVpcConfig={"subnetIds": [subnet]})
    for name, spec in (groups or {"gpu-workers": {"instanceTypes": ["g5.12xlarge"], "min": 0, "max": 4, "desired": 0}}).items():
        eks.create_nodegroup(
            clusterName=cluster,
            nodegroupName=name,
            nodeRole=ROLE,
            subnets=[subnet],
            instanceTypes=spec["instanceTypes"],
            scalingConfig={"minSize": spec["min"], "maxSize": spec["max"], "desiredSize": spec["desired"]},
            labels=spec.get("labels", {}),
        )


def tf_outputs(values: dict[str, Any]) -> dict[str, Any]:
    """What ``terraform output -json`` prints for these values."""
    return {name: {"value": value, "type": "string", "sensitive": False} for name, value in values.items()}


def tool_target_options(outputs: dict[str, Any], **tool_args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """tools/tf_outputs_to_airflow.py on terraform-output values: (``target_options``, aws connection extra),
    parsed back from the Airflow CLI lines it prints, i.e. what a user gets by piping them to ``sh``.
    ``tool_args``: the tool's options (``nodegroup``)."""
    import shlex
    import sys
    from pathlib import Path

    tools = str(Path(__file__).resolve().parents[2] / "tools")
    sys.path.insert(0, tools)
    try:
        from tf_outputs_to_airflow import VARIABLE_PREFIX, commands
    finally:
        sys.path.remove(tools)
    options: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for line in commands(tf_outputs(outputs), **tool_args):
        words = shlex.split(line)
        if words[:5] == ["airflow", "variables", "set", "--json", f"{VARIABLE_PREFIX}target_options"]:
            options = json.loads(words[5])
        if words[:3] == ["airflow", "connections", "add"]:
            extra = json.loads(words[words.index("--conn-extra") + 1])
    assert options and extra, "the tool printed no target_options / connection"
    return options, extra


def eks_example_stack(name: str, groups: dict[str, list[str]], *, max_size: int,
                      desired: dict[str, int] | None = None) -> dict[str, Any]:
    """What terraform/examples/eks creates for raylift (model bucket, cluster, a node group per ``groups`` entry at
    ``desired`` nodes, default 0), and the target options tools/tf_outputs_to_airflow.py makes of its outputs."""
    boto3.client("s3").create_bucket(Bucket=f"{name}-models", CreateBucketConfiguration={"LocationConstraint": REGION})
    eks_nodegroups(name, {f"{name}-{key}": {"instanceTypes": types, "min": 0, "max": max_size,
                                            "desired": (desired or {}).get(key, 0)}
                          for key, types in groups.items()})  # fmt: skip
    options, _ = tool_target_options({
        "raylift_target": "eks", "region": REGION, "model_bucket": f"{name}-models",
        "model_store_uri": f"s3://{name}-models/models", "ecr_repository_url": f"123.dkr.ecr.{REGION}.amazonaws.com/{name}-ray-vllm",
        "codebuild_project": f"{name}-ray-vllm", "eks_cluster": name,
        "eks_nodegroups": {key: f"{name}-{key}" for key in groups}, "eks_namespace": "raylift",
        "eks_service_account": "raylift-ray",
    })  # fmt: skip
    return options
