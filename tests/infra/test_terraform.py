"""Static checks of terraform/: it parses, every reference resolves, module calls match their modules,
the Airflow policy's wildcards are narrowed, and checkov passes (skips carry a reason)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import hcl2
import pytest

from tests.infra.terraform_model import TerraformModule, module_dirs, unquote
from tests.infra.tools_venv import tool

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
MODULE_DIRS = module_dirs(TERRAFORM)
TF_FILES = sorted(TERRAFORM.rglob("*.tf"))


def _rel(path: Path) -> str:
    return str(path.relative_to(TERRAFORM))


@pytest.fixture(scope="module", params=MODULE_DIRS, ids=_rel)
def module(request: pytest.FixtureRequest) -> TerraformModule:
    return TerraformModule.load(request.param)


def test_layout_has_modules_and_both_examples() -> None:
    names = {_rel(d) for d in MODULE_DIRS}
    assert {"examples/ecs", "examples/eks"} <= names
    assert {
        "modules/model_bucket",
        "modules/image_pipeline",
        "modules/airflow_iam",
        "modules/dashboard",
        "modules/ecs_ray",
        "modules/eks_ray",
    } <= names


@pytest.mark.parametrize("tf", TF_FILES, ids=_rel)
def test_every_file_parses(tf: Path) -> None:
    with tf.open() as handle:
        doc = hcl2.load(handle)
    assert doc, f"{tf} is empty"


def test_references_resolve(module: TerraformModule) -> None:
    assert module.references, "a module that references nothing is suspicious"
    assert module.unresolved() == []


def test_variables_have_type_and_description(module: TerraformModule) -> None:
    incomplete = [n for n, body in module.variables.items() if "type" not in body or "description" not in body]
    assert incomplete == []


def test_module_calls_match_called_variables(module: TerraformModule) -> None:
    for call in module.calls.values():
        assert module.is_local_call(call), f"{call.name}: only local modules are used ({call.source})"
        called = TerraformModule.load(module.called_path(call))
        unknown = call.inputs - set(called.variables)
        required = {name for name, body in called.variables.items() if "default" not in body}
        assert unknown == set(), f"module.{call.name} passes undeclared inputs {sorted(unknown)}"
        assert required - call.inputs == set(), f"module.{call.name} misses {sorted(required - call.inputs)}"


def test_module_outputs_used_exist(module: TerraformModule) -> None:
    for ref in (r for r in module.references if r.kind == "module" and "." in r.target):
        name, output = ref.target.split(".", 1)
        called = TerraformModule.load(module.called_path(module.calls[name]))
        assert output in called.outputs, f"{ref.file}: module.{name}.{output} is not an output of {called.path}"


def test_template_files_exist(module: TerraformModule) -> None:
    for file, path in module.template_paths:
        assert (module.path / path).is_file(), f"{file} reads {path}, which is missing"


# -- the facts the brief fixes ------------------------------------------------------------------------


def _load(rel: str) -> TerraformModule:
    return TerraformModule.load(TERRAFORM / rel)


def _resource(module: TerraformModule, rtype: str, name: str) -> dict:
    for doc in module.docs.values():
        for entry in doc.get("resource", []):
            for label, named in entry.items():
                if unquote(label) == rtype and f'"{name}"' in named:
                    return named[f'"{name}"']
    raise AssertionError(f"{rtype}.{name} not found in {module.path}")


def _statements(module: TerraformModule) -> list[dict]:
    found = []
    for doc in module.docs.values():
        for entry in doc.get("data", []):
            for named in entry.get('"aws_iam_policy_document"', {}).values():
                found.extend(named.get("statement", []))
                for dynamic in named.get("dynamic", []):
                    for body in dynamic.values():
                        found.extend(body["content"])
    return found


def test_airflow_policy_narrows_its_wildcards() -> None:
    """Which actions the policy grants is derived from recorded calls (test_iam_from_calls.py); this checks
    that each "*" resource is either unavoidable or narrowed by a condition."""
    statements = _statements(_load("modules/airflow_iam"))
    put_metric = next(s for s in statements if '"cloudwatch:PutMetricData"' in s["actions"])
    condition = put_metric["condition"][0]
    assert unquote(condition["variable"]) == "cloudwatch:namespace"
    assert condition["values"] == ["${var.metric_namespace}"]
    assert _load("modules/airflow_iam").variables["metric_namespace"]["default"] == '"raylift"'
    # "*" only where the API has no resource-level permissions, or narrowed by a condition
    unconditioned = {a for s in statements if '"*"' in s.get("resources", []) and "condition" not in s for a in s["actions"]}
    assert unconditioned == {'"application-autoscaling:DescribeScalableTargets"', '"autoscaling:DescribeAutoScalingGroups"',
                             '"ec2:DescribeInstanceTypes"', '"ec2:DescribeInstances"', '"ecs:DescribeTaskDefinition"',
                             # Cloud Map's list calls (a blue/green release finds the endpoint and green-head services)
                             '"servicediscovery:ListNamespaces"', '"servicediscovery:ListServices"'}


def test_model_bucket_is_versioned_encrypted_tiered_and_private() -> None:
    bucket = _load("modules/model_bucket")
    assert _resource(bucket, "aws_s3_bucket_versioning", "models")["versioning_configuration"][0]["status"] == '"Enabled"'
    sse = _resource(bucket, "aws_s3_bucket_server_side_encryption_configuration", "models")
    assert sse["rule"][0]["apply_server_side_encryption_by_default"][0]["sse_algorithm"] == '"aws:kms"'
    rule = _resource(bucket, "aws_s3_bucket_lifecycle_configuration", "models")["rule"][0]
    assert rule["transition"][0]["storage_class"] == '"INTELLIGENT_TIERING"'
    block = _resource(bucket, "aws_s3_bucket_public_access_block", "models")
    assert all(block[k] is True for k in ("block_public_acls", "block_public_policy", "ignore_public_acls", "restrict_public_buckets"))


def test_ecr_keeps_last_ten_images_and_codebuild_builds_privileged() -> None:
    pipeline = _load("modules/image_pipeline")
    variables = pipeline.variables
    assert variables["images_to_keep"]["default"] == 10
    assert variables["buildspec"]["default"] == '"images/buildspec.yml"'
    project = _resource(pipeline, "aws_codebuild_project", "image")
    env = project["environment"][0]
    assert env["privileged_mode"] is True
    names = {unquote(v["name"]) for v in env["environment_variable"]}
    assert names == {"IMAGE_REPO_URI", "IMAGE_TAG", "DOCKERFILE", "BUILD_CONTEXT"}


def test_ray_control_plane_is_open_only_to_airflow_and_ray_itself() -> None:
    """Serve is open to the VPC; the dashboard / Jobs API and GCS only to the Airflow workers' security groups
    (and the Ray nodes' own group); the tasks run Ray's token auth with the token from Secrets Manager."""
    ecs = _load("modules/ecs_ray")
    rules = {
        unquote(name): body
        for doc in ecs.docs.values()
        for entry in doc.get("resource", [])
        for label, named in entry.items()
        if unquote(label) == "aws_vpc_security_group_ingress_rule"
        for name, body in named.items()
    }
    assert set(rules) == {"serve_from_vpc", "control_plane_from_airflow", "ray_between_nodes"}
    assert [r for r in rules.values() if "cidr_ipv4" in r] == [rules["serve_from_vpc"]]
    assert rules["serve_from_vpc"]["from_port"] == '${var.ray_ports["serve"]}'
    assert rules["control_plane_from_airflow"]["referenced_security_group_id"] == "${each.value[1]}"
    assert '["dashboard", "gcs", "metrics"]' in rules["control_plane_from_airflow"]["for_each"].replace("'", '"')
    assert rules["ray_between_nodes"]["referenced_security_group_id"] == "${aws_security_group.ray.id}"
    assert sorted(ecs.variables["ray_ports"]["default"].values()) == [6379, 8000, 8080, 8265]
    tasks = (TERRAFORM / "modules/ecs_ray/tasks.tf").read_text()
    assert '{ name = "RAY_AUTH_MODE", value = "token" }' in tasks
    assert 'secrets = [{ name = "RAY_AUTH_TOKEN", valueFrom = aws_secretsmanager_secret.ray_auth.arn }]' in tasks
    example = _load("examples/ecs")
    assert "control_plane_security_group_ids" in example.calls["ray"].inputs


def test_kuberay_pods_get_a_network_policy_and_a_token_secret() -> None:
    eks = _load("modules/eks_ray")
    policy = _resource(eks, "kubernetes_network_policy_v1", "ray_control_plane")["spec"][0]
    open_to_all = [rule for rule in policy["ingress"] if "from" not in rule]
    assert [[p["port"] for p in rule["ports"]] for rule in open_to_all] == [['"8000"']]  # only Serve
    assert {"kubernetes_secret_v1.ray_auth", "random_password.ray_auth"} <= eks.resources
    assert unquote(eks.variables["kuberay_operator_version"]["default"]) >= "1.6.0"


# -- checkov -------------------------------------------------------------------------------------------

SKIP = re.compile(r"#\s*checkov:skip=(?P<id>[A-Z0-9_]+)(?::(?P<reason>.*))?")


def test_every_checkov_skip_has_a_reason() -> None:
    skips = [(tf, m) for tf in TF_FILES for m in SKIP.finditer(tf.read_text())]
    assert skips, "expected some justified skips"
    bare = [f"{_rel(tf)}: {m['id']}" for tf, m in skips if len((m["reason"] or "").strip()) < 20]
    assert bare == []


@pytest.mark.timeout(900)
def test_checkov_passes() -> None:
    checkov = tool("bin/checkov")
    run = subprocess.run(
        [str(checkov), "-d", str(TERRAFORM), "--framework", "terraform", "-o", "json", "--quiet", "--compact",
         "--download-external-modules", "false", "--skip-download"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )
    reports = json.loads(run.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']}:{c['file_line_range'][0]})"
        for report in reports
        for c in report.get("results", {}).get("failed_checks", [])
    ]
    summary = {key: sum(r["summary"][key] for r in reports) for key in ("passed", "failed", "parsing_errors")}
    assert failed == [], "\n".join(failed)
    assert summary == {"passed": summary["passed"], "failed": 0, "parsing_errors": 0}
    assert summary["passed"] > 200, f"checkov ran only {summary['passed']} checks: {run.stderr[-500:]}"


def test_ecs_defaults_give_three_nodes_and_twelve_gpus() -> None:
    ecs = _load("modules/ecs_ray")
    nodes = 1 + ecs.variables["worker_count"]["default"]
    assert (nodes, nodes * ecs.variables["gpus_per_node"]["default"]) == (3, 12)
    assert ecs.variables["worker_instance_type"]["default"].startswith('"g5.')
    ami = next(body for doc in ecs.docs.values() for entry in doc.get("data", []) for label, named in entry.items()
               if unquote(label) == "aws_ssm_parameter" for body in named.values())
    assert "/ecs/optimized-ami/" in ami["name"] and "/gpu/" in ami["name"]


def test_eks_has_accelerator_groups_kuberay_karpenter_neuron_and_pod_identity() -> None:
    eks = _load("modules/eks_ray")
    ami_types = {unquote(g["ami_type"]) for g in eks.variables["node_groups"]["default"].values()}
    assert ami_types == {"AL2023_x86_64_NVIDIA", "AL2023_ARM_64_STANDARD", "AL2023_x86_64_STANDARD", "AL2023_x86_64_NEURON"}
    charts = {unquote(_resource(eks, "helm_release", n)["chart"]) for n in ("kuberay_operator", "karpenter", "neuron")}
    assert charts == {"kuberay-operator", "karpenter", "neuron-helm-chart"}
    assert {"aws_eks_pod_identity_association.ray", "kubectl_manifest.node_pool"} <= eks.resources
