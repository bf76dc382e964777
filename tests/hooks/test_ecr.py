"""ECR: an image whose content tag exists is not built again."""

from __future__ import annotations

import pytest

from raylift.errors import BuildError
from raylift.hooks.ecr import EcrImageHook
from tests.aws.moto_resources import ecr_repository


def test_tag_exists_and_repository_uri(aws: str) -> None:
    uri = ecr_repository("ray-vllm", tags=("abc123",))
    hook = EcrImageHook(aws_conn_id="aws_default")
    assert hook.repository_uri("ray-vllm") == uri
    assert uri.endswith(".dkr.ecr.us-west-2.amazonaws.com/ray-vllm")
    assert hook.image_tag_exists("ray-vllm", "abc123") is True
    assert hook.image_tag_exists("ray-vllm", "other") is False


def test_missing_repository_is_a_build_error(aws: str) -> None:
    hook = EcrImageHook(aws_conn_id="aws_default")
    with pytest.raises(BuildError, match="ECR repository 'nope' does not exist"):
        hook.image_tag_exists("nope", "abc")
    with pytest.raises(BuildError, match="ECR repository 'nope' does not exist"):
        hook.repository_uri("nope")


def test_retag_points_a_moving_tag_at_the_content_tag(aws: str) -> None:
    ecr_repository("ray-vllm", tags=("abc123",))
    hook = EcrImageHook(aws_conn_id="aws_default")
    assert hook.retag("ray-vllm", "abc123", "latest") is True
    assert hook.retag("ray-vllm", "abc123", "latest") is False  # already there: nothing to do
    details = hook.conn.describe_images(repositoryName="ray-vllm")["imageDetails"]
    assert [sorted(d["imageTags"]) for d in details] == [["abc123", "latest"]]
    with pytest.raises(BuildError, match="ray-vllm:missing is missing.*did not push"):
        hook.retag("ray-vllm", "missing", "latest")
