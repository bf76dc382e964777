"""From a recorded AWS API call to the IAM actions it needs, and from terraform to what a principal is granted.

The mapping is the Service Authorization Reference's: the action is ``<service prefix>:<operation>`` except
where AWS says otherwise (S3's list/head/multipart calls, STS's GetCallerIdentity which needs no permission,
SSE-KMS objects, which also need the bucket key's KMS actions).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra.terraform_model import TerraformModule, unquote

# botocore client name -> IAM service prefix, where they differ
SERVICE_PREFIX = {"elbv2": "elasticloadbalancing", "monitoring": "cloudwatch"}

# actions an operation also needs (the reference's "dependent actions"): a task-definition revision names the
# task/execution roles (passed to ECS) and carries the tags of the one it copies (tag-on-create)
DEPENDENT_ACTIONS: dict[tuple[str, str], tuple[str, ...]] = {
    ("ecs", "RegisterTaskDefinition"): ("iam:PassRole", "ecs:TagResource"),
}

# operations that need no IAM permission at all
NO_PERMISSION = {("sts", "GetCallerIdentity")}

# S3 operations whose action is not their own name
S3_ACTIONS: dict[str, tuple[str, ...]] = {
    "ListObjectsV2": ("s3:ListBucket",),
    "ListObjects": ("s3:ListBucket",),
    "HeadBucket": ("s3:ListBucket",),
    "HeadObject": ("s3:GetObject",),
    "CreateMultipartUpload": ("s3:PutObject",),
    "UploadPart": ("s3:PutObject",),
    "CompleteMultipartUpload": ("s3:PutObject",),
    "UploadPartCopy": ("s3:PutObject", "s3:GetObject"),
    "CopyObject": ("s3:PutObject", "s3:GetObject"),
    "ListParts": ("s3:ListMultipartUploadParts",),
    "ListMultipartUploads": ("s3:ListBucketMultipartUploads",),
    "DeleteObjects": ("s3:DeleteObject",),
}
# Every bucket raylift uses is the model bucket, which is SSE-KMS (modules/model_bucket): reading an object
# needs kms:Decrypt, writing one kms:GenerateDataKey, a multipart upload both.
S3_KMS: dict[str, tuple[str, ...]] = {
    "GetObject": ("kms:Decrypt",),
    "HeadObject": (),
    "PutObject": ("kms:GenerateDataKey",),
    "CreateMultipartUpload": ("kms:GenerateDataKey", "kms:Decrypt"),
    "UploadPart": ("kms:GenerateDataKey", "kms:Decrypt"),
    "CompleteMultipartUpload": ("kms:Decrypt",),
    "CopyObject": ("kms:Decrypt", "kms:GenerateDataKey"),
}


def iam_actions(call: dict[str, Any]) -> tuple[str, ...]:
    """The IAM actions one recorded call (service, operation, versioned) needs."""
    service, operation = call["service"], call["operation"]
    if (service, operation) in NO_PERMISSION:
        return ()
    if service == "s3":
        if operation == "GetObject" and call.get("versioned"):
            actions: tuple[str, ...] = ("s3:GetObjectVersion",)
        else:
            actions = S3_ACTIONS.get(operation, (f"s3:{operation}",))
        return actions + S3_KMS.get(operation, ())
    return (f"{SERVICE_PREFIX.get(service, service)}:{operation}", *DEPENDENT_ACTIONS.get((service, operation), ()))


@dataclass(frozen=True)
class Statement:
    sid: str
    actions: tuple[str, ...]
    resources: tuple[str, ...]
    conditions: tuple[str, ...]

    def grants(self, action: str) -> bool:
        return any(fnmatch.fnmatchcase(action.lower(), a.lower()) for a in self.actions)


def policy_statements(module_dir: Path, document: str) -> list[Statement]:
    """The statements (static and dynamic) of ``data "aws_iam_policy_document" "<document>"``."""
    module = TerraformModule.load(module_dir)
    for doc in module.docs.values():
        for entry in doc.get("data", []):
            body = entry.get('"aws_iam_policy_document"', {}).get(f'"{document}"')
            if body is None:
                continue
            raw = list(body.get("statement", []))
            for dynamic in body.get("dynamic", []):
                for dyn in dynamic.values():
                    raw.extend(dyn["content"])
            return [
                Statement(
                    sid=unquote(s.get("sid", '""')),
                    actions=tuple(unquote(a) for a in s.get("actions", [])),
                    resources=tuple(unquote(r) for r in s.get("resources", [])),
                    conditions=tuple(unquote(c["variable"]) for c in s.get("condition", [])),
                )
                for s in raw
            ]
    raise AssertionError(f'no data "aws_iam_policy_document" "{document}" in {module_dir}')
