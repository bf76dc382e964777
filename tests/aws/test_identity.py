"""Identity and bucket checks against the moto server: clear errors before any long job."""

from __future__ import annotations

import boto3
import pytest

from raylift.aws.identity import caller_identity, check_bucket
from raylift.errors import CredentialsError, StagingError


def test_caller_identity_names_account_and_arn(aws: str) -> None:
    who = caller_identity("aws_default")
    assert who.account == "123456789012"
    assert who.arn.startswith("arn:aws:")


def test_missing_credentials_raise_credentials_error(aws: str, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(CredentialsError, match="No AWS credentials found for connection 'aws_default'"):
        caller_identity("aws_default")


def test_bucket_check(aws: str) -> None:
    s3 = boto3.client("s3", endpoint_url=aws)
    s3.create_bucket(Bucket="models", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    check_bucket(s3, "models")  # exists: no error
    with pytest.raises(StagingError, match="S3 bucket 'nope' does not exist"):
        check_bucket(s3, "nope")


def test_unreachable_endpoint_is_a_staging_error() -> None:
    from botocore.config import Config

    s3 = boto3.client(
        "s3",
        endpoint_url="http://127.0.0.1:9",  # discard port: nothing listens
        region_name="us-west-2",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(StagingError, match="unreachable"):
        check_bucket(s3, "models")
