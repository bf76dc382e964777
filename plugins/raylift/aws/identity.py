"""Fail fast, with a clear message, before any long AWS job: who am I, and can I reach the bucket?"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from raylift.errors import CredentialsError, StagingError

log = logging.getLogger(__name__)

# Error codes that mean "these credentials are not usable", as opposed to "not allowed to do this".
CREDENTIAL_ERROR_CODES = frozenset(
    {
        "InvalidClientTokenId",
        "ExpiredToken",
        "ExpiredTokenException",
        "SignatureDoesNotMatch",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
        "AuthFailure",
    }
)


@dataclass(frozen=True)
class CallerIdentity:
    """Who the AWS calls run as (account and ARN are not secrets; keys never leave botocore)."""

    account: str
    arn: str


def _error_code(exc: BaseException) -> str:
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def caller_identity(
    aws_conn_id: str | None = "aws_default", region_name: str | None = None, *, sts_client: Any = None
) -> CallerIdentity:
    """STS GetCallerIdentity through the connection; CredentialsError when there are no usable credentials.

    :param sts_client: an STS client already made from the connection (saves building another session).
    """
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    try:
        if sts_client is None:
            from airflow.providers.amazon.aws.hooks.sts import StsHook

            sts_client = StsHook(aws_conn_id=aws_conn_id, region_name=region_name).conn
        reply = sts_client.get_caller_identity()
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise CredentialsError(
            f"No AWS credentials found for connection {aws_conn_id!r} ({type(exc).__name__}): set the "
            "connection's login/password or role, or provide the default chain (env vars, profile, "
            "instance or pod role)."
        ) from None
    except ClientError as exc:
        code = _error_code(exc)
        if code in CREDENTIAL_ERROR_CODES:
            raise CredentialsError(
                f"AWS rejected the credentials of connection {aws_conn_id!r} ({code}): refresh or replace them."
            ) from None
        raise
    identity = CallerIdentity(account=reply["Account"], arn=reply["Arn"])
    log.info("AWS calls run as %s (account %s)", identity.arn, identity.account)
    return identity


def check_bucket(
    s3_client: Any, bucket: str, *, role: str = "S3 bucket", fix: str = "create it (terraform) or set the 'bucket' target option"
) -> None:
    """HeadBucket: StagingError naming the bucket when it is missing, forbidden or unreachable.

    :param role: what the bucket is to the caller, first words of each message (e.g. "Model source bucket").
    :param fix: what to do when it does not exist.
    """
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    try:
        s3_client.head_bucket(Bucket=bucket)
    except NoCredentialsError:
        raise CredentialsError(
            f"No AWS credentials to reach bucket {bucket!r}: configure the AWS connection."
        ) from None
    except EndpointConnectionError as exc:
        raise StagingError(
            f"{role} {bucket!r} is unreachable ({exc}): check the region, endpoint and network path."
        ) from None
    except ClientError as exc:
        code = _error_code(exc)
        if code in ("404", "NoSuchBucket", "NotFound"):
            raise StagingError(
                f"{role} {bucket!r} does not exist: {fix}."
            ) from None
        if code in ("403", "AccessDenied", "Forbidden"):
            raise StagingError(
                f"Access to {role} {bucket!r} is denied: grant s3:ListBucket/GetObject/PutObject to the caller."
            ) from None
        if code in CREDENTIAL_ERROR_CODES:
            raise CredentialsError(f"AWS rejected the credentials while reaching bucket {bucket!r} ({code}).") from None
        raise StagingError(f"{role} {bucket!r} check failed ({code or exc}).") from None
