"""The CodeBuild source: the build step uploads the build context where the terraform project reads it, under a
content-addressed key, and the zip holds everything the buildspec and the Dockerfile use. moto completes a
build without reading its source, so the zip is fetched back from the moto server and checked here: against the
image tests' own Dockerfile/.dockerignore checker (``tests/images/test_dockerfiles.copy_problems``) and git's
list of tracked files. arm64 images go to the arm64 project with DOCKER_PLATFORM=linux/arm64.
"""

from __future__ import annotations

import io
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from raylift.targets import get_target
from tests.aws.moto_resources import codebuild_project, ecr_repository
from tests.aws.standins import Proxy
from tests.images.test_dockerfiles import copy_problems, parse_dockerfile
from tests.infra.terraform_model import TerraformModule, blocks, unquote

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = TerraformModule.load(ROOT / "terraform" / "modules" / "image_pipeline")
BUCKET = "raylift-models"
RAY_IMAGES = ["ray-vllm-gpu", "ray-vllm-cpu", "ray-neuron", "ray-llamacpp-arm64"]


def _default(name: str) -> str:
    return unquote(PIPELINE.variables[name]["default"])


def _project(name: str) -> dict[str, Any]:
    return next(body[f'"{name}"'] for doc in PIPELINE.docs.values() for rtype, body in blocks(doc, "resource")
                if rtype == "aws_codebuild_project" and f'"{name}"' in body)


@pytest.fixture()
def stack(s3_proxy: Proxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Proxy:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("RAYLIFT_ROOT", raising=False)
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    ecr_repository("ray-vllm")
    codebuild_project("raylift-image")
    codebuild_project("raylift-image-arm64")
    return s3_proxy


def _start(proxy: Proxy, image: str) -> dict[str, Any]:
    target = get_target("ecs", cluster="ray", bucket=BUCKET, head_address="127.0.0.1", image_name=image)
    before = len(proxy.bodies)
    assert target.start_artifact_build().build_id is not None
    [body] = [b for t, b in proxy.bodies[before:] if t.endswith(".StartBuild")]
    return json.loads(body)


@pytest.mark.parametrize("image", RAY_IMAGES)
def test_the_build_reads_a_context_with_everything_the_build_uses(stack: Proxy, image: str, tmp_path: Path) -> None:
    sent = _start(stack, image)
    env = {e["name"]: e["value"] for e in sent["environmentVariablesOverride"]}
    # where the terraform project reads its source: <source bucket>/<source_prefix>/...
    project_location = unquote(_project("image")["source"][0]["location"])
    assert project_location == "${var.source_bucket_name}/${var.source_prefix}/latest.zip"
    bucket, key = sent["sourceLocationOverride"].split("/", 1)
    assert (sent["sourceTypeOverride"], bucket) == ("S3", BUCKET)
    assert key.startswith(f"{_default('source_prefix')}/") and key.endswith(".zip")
    assert Path(key).stem.startswith(env["IMAGE_TAG"]), "the key is the content digest the image tag is cut from"

    data = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    context = tmp_path / "context"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = set(archive.namelist())
        archive.extractall(context)
    buildspec = _default("buildspec")
    assert buildspec in names, "CodeBuild reads the buildspec from the source"
    assert yaml.safe_load((context / buildspec).read_text())["version"] == 0.2
    dockerfile = env["DOCKERFILE"]
    assert dockerfile in names and env["BUILD_CONTEXT"] == "."
    text = (context / dockerfile).read_text()
    ignore = context / f"{dockerfile}.dockerignore"
    assert ignore.is_file(), "BuildKit reads <Dockerfile>.dockerignore from the context"
    assert copy_problems(text, ignore.read_text(), context) == []
    for ins in parse_dockerfile(text):  # folders COPYed whole: every tracked file of them is in the zip
        words = [w for w in ins.args.split() if not w.startswith("--")]
        if ins.keyword == "COPY" and "--from" not in ins.args:
            tracked = subprocess.run(["git", "ls-files", *words[:-1]], cwd=ROOT, capture_output=True, text=True,
                                     check=True).stdout.split()
            assert set(tracked) <= names, f"{image}: tracked files of {words[:-1]} missing from the context"


def test_the_same_context_is_uploaded_once(stack: Proxy) -> None:
    first = _start(stack, "ray-vllm-cpu")["sourceLocationOverride"]
    puts = sum(1 for method, path, _ in stack.seen if method == "PUT" and path.endswith(".zip"))
    assert _start(stack, "ray-vllm-cpu")["sourceLocationOverride"] == first
    assert sum(1 for method, path, _ in stack.seen if method == "PUT" and path.endswith(".zip")) == puts


def test_the_graviton_image_builds_on_the_arm64_project(stack: Proxy) -> None:
    sent = _start(stack, "ray-llamacpp-arm64")
    env = {e["name"]: e["value"] for e in sent["environmentVariablesOverride"]}
    assert sent["projectName"] == "raylift-image-arm64"
    assert env["DOCKER_PLATFORM"] == "linux/arm64"
    arm = _project("image_arm64")
    assert unquote(arm["name"]) == "${var.name}-arm64"
    assert (arm["environment"][0]["type"], _default("arm64_build_image")) == ('"ARM_CONTAINER"', "aws/codebuild/amazonlinux-aarch64-standard:3.0")
    assert arm["source"][0]["location"] == _project("image")["source"][0]["location"]
    assert _start(stack, "ray-vllm-gpu")["projectName"] == "raylift-image"  # x86 images stay on the x86 project
