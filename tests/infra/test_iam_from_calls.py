"""IAM derived from behaviour: every AWS call raylift's code makes in the moto-backed tests must be granted by
the terraform policy of the principal that makes it in a deployment.

The botocore recorder (``tests.infra.aws_calls``) records the AWS tests' calls: in the same pytest run when it
has all of them (``make test``'s; this module then runs last), else in a child pytest of just them. The
calls are mapped to IAM actions (``tests.infra.iam_actions``) and looked up in the policies. Nothing here
lists the actions raylift needs: the recorded calls do.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.infra import aws_calls
from tests.infra.iam_actions import Statement, iam_actions, policy_statements

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
# the moto-backed tests whose raylift calls are recorded
RECORDED_TESTS = list(aws_calls.RECORDED_TESTS)
# principal -> the policy documents that principal gets (each must grant every call it makes)
PRINCIPALS: dict[str, list[tuple[str, str]]] = {
    "airflow": [("modules/airflow_iam", "airflow")],  # Airflow workers and triggerer
    "ray": [("modules/ecs_ray", "task"), ("modules/eks_ray", "ray_pods")],  # the Serve replicas
}
# Granted, needed, but not reached by a moto-backed test (with why); anything else granted and never called
# is a grant too many.
GRANTED_NOT_RECORDED = {
    "s3:AbortMultipartUpload": "s3transfer aborts a multipart upload that fails part-way (moto never fails one)",
}


@pytest.fixture(scope="module")
def calls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    in_session = aws_calls.session_record()
    if in_session is not None:  # this run ran the recorded tests before this module
        if request.session.testsfailed:
            warnings.warn("the record may miss the calls of this run's failing tests", stacklevel=1)
        assert in_session, "no AWS call was recorded in this run: is the recorder installed?"
        return in_session
    tmp = tmp_path_factory.mktemp("aws-calls")
    log = tmp / "calls.jsonl"
    env = {**os.environ, aws_calls.ENV: str(log)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.infra.aws_calls",
         f"--basetemp={tmp / 'inner'}", *RECORDED_TESTS],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    # A failing AWS test is reported by its own run; here it only means the record may miss its calls.
    assert run.returncode in (0, 1), f"the recorded AWS tests did not run:\n{run.stdout[-4000:]}"
    if run.returncode:
        failed = [line for line in run.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        warnings.warn(f"the record may miss the calls of failing AWS tests: {failed}", stacklevel=1)
    recorded = aws_calls.load(log)
    assert recorded, "no AWS call was recorded: is the recorder installed?"
    return recorded


def _table(calls: list[dict[str, Any]]) -> str:
    count = collections.Counter(
        (c["principal"], c["service"], c["operation"], ", ".join(iam_actions(c)) or "(none needed)", c["caller"].rsplit(":", 1)[0])
        for c in calls
    )
    lines = [f"{'principal':9} {'service:operation':48} {'calls':>5}  {'IAM actions':55} first caller"]
    seen: set[tuple[str, ...]] = set()
    for (principal, service, operation, actions, caller), n in sorted(count.items()):
        key = (principal, service, operation, actions)
        if key in seen:
            continue
        seen.add(key)
        total = sum(v for k, v in count.items() if k[:4] == key)
        lines.append(f"{principal:9} {service + ':' + operation:48} {total:>5}  {actions:55} {caller}")
    return "\n".join(lines)


def missing_grants(calls: list[dict[str, Any]], policies: dict[str, list[tuple[str, list[Statement]]]]) -> list[str]:
    """Each (principal, policy, action, example caller) a recorded call needs and its policy lacks."""
    missing = set()
    for call in calls:
        for action in iam_actions(call):
            for name, statements in policies[call["principal"]]:
                if not any(s.grants(action) for s in statements):
                    missing.add(f"{call['principal']} ({name}) lacks {action}: {call['service']} {call['operation']} "
                                f"from {call['caller']} in {call['test']}")
    return sorted(missing)


def _policies() -> dict[str, list[tuple[str, list[Statement]]]]:
    return {
        principal: [(f"{module}:{doc}", policy_statements(TERRAFORM / module, doc)) for module, doc in docs]
        for principal, docs in PRINCIPALS.items()
    }


@pytest.mark.timeout(1200)
def test_every_recorded_call_is_granted_to_its_principal(calls: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nAWS calls raylift made in {' '.join(RECORDED_TESTS)} ({len(calls)} in all):\n{_table(calls)}")
    assert {c["principal"] for c in calls} == {"airflow", "ray"}
    assert missing_grants(calls, _policies()) == []


@pytest.mark.timeout(1200)
def test_the_airflow_policy_grants_nothing_raylift_does_not_call(calls: list[dict[str, Any]]) -> None:
    needed = {a for c in calls if c["principal"] == "airflow" for a in iam_actions(c)}
    granted = {a for _, statements in _policies()["airflow"] for s in statements for a in s.actions}
    assert granted - needed == set(GRANTED_NOT_RECORDED)


def test_the_check_fails_when_one_action_is_removed() -> None:
    """The oracle has teeth: the same policies with one action taken out miss exactly that action."""
    call = {"principal": "airflow", "service": "ecr", "operation": "PutImage", "caller": "x", "test": "t"}
    policies = _policies()
    assert missing_grants([call], policies) == []
    name, statements = policies["airflow"][0]
    cut = [Statement(s.sid, tuple(a for a in s.actions if a != "ecr:PutImage"), s.resources, s.conditions) for s in statements]
    assert missing_grants([call], {"airflow": [(name, cut)]}) == [
        "airflow (modules/airflow_iam:airflow) lacks ecr:PutImage: ecr PutImage from x in t"
    ]


def test_mapping_follows_the_service_authorization_reference() -> None:
    def actions(service: str, operation: str, **extra: Any) -> tuple[str, ...]:
        return iam_actions({"service": service, "operation": operation, **extra})

    assert actions("sts", "GetCallerIdentity") == ()
    assert actions("s3", "ListObjectsV2") == ("s3:ListBucket",)
    assert actions("s3", "HeadObject") == ("s3:GetObject",)
    assert actions("s3", "UploadPart") == ("s3:PutObject", "kms:GenerateDataKey", "kms:Decrypt")
    assert actions("s3", "GetObject", versioned=True) == ("s3:GetObjectVersion", "kms:Decrypt")
    assert actions("cloudwatch", "PutMetricData") == ("cloudwatch:PutMetricData",)
    assert actions("application-autoscaling", "RegisterScalableTarget") == ("application-autoscaling:RegisterScalableTarget",)


# -- CodeBuild's role: the calls the buildspec makes ----------------------------------------------------
# docker's registry calls against ECR (login, then push), as AWS's "Pushing an image" page lists them
DOCKER_PUSH = ("ecr:BatchCheckLayerAvailability", "ecr:InitiateLayerUpload", "ecr:UploadLayerPart",
               "ecr:CompleteLayerUpload", "ecr:PutImage")
# aws-cli commands whose API operation is not the command's CamelCase
CLI_OPERATIONS = {("ecr", "get-login-password"): "GetAuthorizationToken"}


def buildspec_calls() -> list[dict[str, Any]]:
    """Every AWS API call images/buildspec.yml makes as CodeBuild's role: its ``aws <service> <command>``s, the
    docker push to ECR, and CodeBuild fetching the S3 source zip."""
    import re

    import yaml

    spec = yaml.safe_load((ROOT / "images/buildspec.yml").read_text())
    text = "\n".join(c for phase in spec["phases"].values() for c in phase.get("commands", []))
    calls = [{"service": "s3", "operation": "GetObject"}]  # the source zip
    for service, command in re.findall(r"\baws\s+([a-z0-9-]+)\s+([a-z0-9-]+)", text):
        operation = CLI_OPERATIONS.get((service, command)) or "".join(p.title() for p in command.split("-"))
        calls.append({"service": service, "operation": operation})
    if re.search(r"\bdocker\s+push\b", text):
        calls += [{"service": "ecr", "operation": a.split(":")[1]} for a in DOCKER_PUSH]
    return [c | {"principal": "codebuild", "caller": "images/buildspec.yml", "test": "-"} for c in calls]


def test_codebuilds_role_grants_what_the_buildspec_calls() -> None:
    calls = buildspec_calls()
    assert {"DescribeImages", "GetAuthorizationToken", "PutImage", "GetObject"} <= {c["operation"] for c in calls}
    policies = {"codebuild": [("modules/image_pipeline:codebuild",
                               policy_statements(TERRAFORM / "modules/image_pipeline", "codebuild"))]}
    assert missing_grants(calls, policies) == []
