"""tools/tf_outputs_to_airflow.py on sample `terraform output -json` documents of both example roots.

The samples carry exactly the outputs the example roots declare, so renaming an output without the
tool (or the other way round) fails here; every printed command is parsed by Airflow's own CLI parser.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.terraform_model import TerraformModule

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools/tf_outputs_to_airflow.py"

# Outputs naming where the Ray auth token lives (not the token): the tool withholds every name that looks like
# a credential, so the docs have users pass these by hand.
WITHHELD_BY_NAME = {"ray_auth_token_secret_arn", "ray_auth_secret"}

SAMPLE_VALUES = {
    "ecs": {
        "raylift_target": "ecs",
        "region": "us-west-2",
        "model_bucket": "raylift-ecs-models-123456789012",
        "model_store_uri": "s3://raylift-ecs-models-123456789012/models",
        "ecr_repository_url": "123456789012.dkr.ecr.us-west-2.amazonaws.com/raylift-ecs-ray-vllm",
        "image_tag": "latest",
        "codebuild_project": "raylift-ecs-ray-vllm",
        "ecs_cluster": "raylift-ecs",
        "ecs_head_service": "raylift-ecs-head",
        "ecs_worker_service": "raylift-ecs-worker",
        "cloudmap_namespace": "raylift.local",
        "cloudmap_service": "head",
        "cloudmap_endpoint_service": "serve",
        "gpus_per_node": 4,
        "airflow_role_arn": "arn:aws:iam::123456789012:role/raylift-ecs-airflow",
        "dashboard_name": "raylift-ecs",
        "ray_auth_token_secret_arn": "arn:aws:secretsmanager:us-west-2:123456789012:secret:raylift-ecs-ray-auth-x",
        "ecs_staging_task_definition": "raylift-ecs-model-staging",
    },
    "eks": {
        "raylift_target": "eks",
        "region": "us-east-2",
        "model_bucket": "raylift-eks-models-123456789012",
        "model_store_uri": "s3://raylift-eks-models-123456789012/models",
        "ecr_repository_url": "123456789012.dkr.ecr.us-east-2.amazonaws.com/raylift-eks-ray-vllm",
        "codebuild_project": "raylift-eks-ray-vllm",
        "eks_cluster": "raylift-eks",
        "eks_nodegroups": {"gpu": "gpu", "graviton": "graviton", "inferentia": "inferentia"},
        "eks_namespace": "raylift",
        "eks_service_account": "raylift-ray",
        "airflow_role_arn": None,
        "dashboard_name": "raylift-eks",
        "ray_auth_secret": "ray-auth-token",
        "eks_serve_endpoint": "http://raylift-eks-serve-0123456789abcdef.elb.us-east-2.amazonaws.com:8000",
        "eks_staging_service_account": "raylift-model-staging",
        "eks_gateway_class": "raylift",
        "staging_image": "123456789012.dkr.ecr.us-east-2.amazonaws.com/raylift-airflow:1.4.0",
    },
}


def terraform_json(values: dict) -> dict:
    """What `terraform output -json` prints for these values."""
    return {name: {"sensitive": False, "type": "string", "value": value} for name, value in values.items()}


def run_tool(document: dict | str, *args: str, tmp_path: Path | None = None) -> subprocess.CompletedProcess[str]:
    text = document if isinstance(document, str) else json.dumps(document)
    return subprocess.run([sys.executable, str(TOOL), *args], input=text, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("target", ["ecs", "eks"])
def test_samples_match_the_example_outputs(target: str) -> None:
    declared = TerraformModule.load(ROOT / "terraform/examples" / target).outputs
    assert declared == set(SAMPLE_VALUES[target])


@pytest.mark.parametrize("target", ["ecs", "eks"])
def test_prints_connection_variables_and_target_options(target: str) -> None:
    values = SAMPLE_VALUES[target]
    run = run_tool(terraform_json(values))
    assert run.returncode == 0, run.stderr
    lines = [shlex.split(line) for line in run.stdout.splitlines() if not line.startswith("#")]

    conn = next(line for line in lines if line[:3] == ["airflow", "connections", "add"])
    assert conn[3] == "aws_default"
    assert json.loads(conn[conn.index("--conn-extra") + 1]) == {"region_name": values["region"]}
    assert "--conn-login" not in conn and "--conn-password" not in conn

    variables = {}
    for line in lines:
        if line[:3] == ["airflow", "variables", "set"]:
            is_json = "--json" in line
            key, value = [arg for arg in line[3:] if arg != "--json"]
            variables[key] = json.loads(value) if is_json else value
    expected = {
        (n if n.startswith("raylift_") else f"raylift_{n}"): (v if isinstance(v, (dict, list)) else str(v))
        for n, v in values.items()
        if v is not None and n not in WITHHELD_BY_NAME
    }
    options = variables.pop("raylift_target_options")
    assert variables == expected
    assert options["region_name"] == values["region"] and options["aws_conn_id"] == "aws_default"
    assert options["cluster" if target == "ecs" else "cluster_name"] == values[f"{target}_cluster"]
    # converted here, once: the s3:// model store and the ECR URL, which the targets refuse as such
    assert (options["bucket"], options["model_prefix"]) == (values["model_bucket"], "models")
    assert options["ecr_repository"] == values["ecr_repository_url"].split("/", 1)[1]


def target_options_of(run: subprocess.CompletedProcess[str]) -> dict:
    line = next(line for line in run.stdout.splitlines() if "raylift_target_options" in line)
    return json.loads(shlex.split(line)[-1])


@pytest.mark.parametrize("target", ["ecs", "eks"])
def test_terraform_to_tool_to_target_gives_options_the_target_accepts(target: str) -> None:
    """The documented flow: terraform output -> this tool -> Airflow Variable -> the DAG's target_options,
    taken as is by the target (which refuses the stacks' own names), in raylift's spelling only."""
    from raylift.targets import get_target

    run = run_tool(terraform_json(SAMPLE_VALUES[target]))
    assert run.returncode == 0, run.stderr
    options = target_options_of(run)
    made = get_target(target, **options)  # refuses unknown keys and the stacks' spellings
    model = type(made.options)
    assert set(options) <= set(model.model_fields)
    assert not set(options) & set(model.RENAMED)
    assert made.aws.ecr_repository == f"raylift-{target}-ray-vllm"
    assert made.model_store_uri() == SAMPLE_VALUES[target]["model_store_uri"]


@pytest.mark.parametrize(("target", "remote"), [("ecs", "ecs_staging_task_definition"), ("eks", "staging_image")])
def test_staging_runs_beside_the_cluster_when_the_stack_has_a_staging_image_else_on_the_worker(
    target: str, remote: str
) -> None:
    """With the stack's staging task (ECS) or image (EKS) the target stages remotely (its default); a stack applied
    without staging_image outputs null, and the options say in_worker rather than name a task that does not exist."""
    from raylift.targets import get_target

    options = target_options_of(run_tool(terraform_json(SAMPLE_VALUES[target])))
    assert "staging" not in options
    assert options["staging_task_definition" if target == "ecs" else "staging_image"] == SAMPLE_VALUES[target][remote]
    without = target_options_of(run_tool(terraform_json(SAMPLE_VALUES[target] | {remote: None})))
    assert without["staging"] == "in_worker" and "staging_task_definition" not in without
    assert "staging_image" not in without
    get_target(target, **without)  # accepted as is


def test_the_eks_worker_node_group_is_picked_by_key() -> None:
    document = terraform_json(SAMPLE_VALUES["eks"] | {"eks_nodegroups": {"gpu": "g", "inferentia": "inf"}})
    assert target_options_of(run_tool(document))["worker_nodegroup"] == "g"  # profile gpu-vllm's group
    assert target_options_of(run_tool(document, "--nodegroup", "inferentia"))["worker_nodegroup"] == "inf"
    run = run_tool(document, "--nodegroup", "graviton")
    assert run.returncode == 2 and "no 'graviton' node group (it has ['gpu', 'inferentia'])" in run.stderr


def test_every_command_is_accepted_by_airflows_cli_parser() -> None:
    from airflow.cli.cli_parser import get_parser

    parser = get_parser()
    for target, values in SAMPLE_VALUES.items():
        run = run_tool(terraform_json(values), "--replace", "--aws-conn-id", f"aws_{target}")
        assert run.returncode == 0, run.stderr
        for line in run.stdout.splitlines():
            if line.startswith("#"):
                continue
            argv = shlex.split(line.removesuffix(" || true"))
            assert argv[0] == "airflow"
            parsed = parser.parse_args(argv[1:])
            assert callable(parsed.func), line


def test_sensitive_and_credential_like_outputs_are_never_printed() -> None:
    document = terraform_json(SAMPLE_VALUES["ecs"])
    document["grafana_admin"] = {"sensitive": True, "type": "string", "value": "s3cr3t-value-1"}
    document["ci_token"] = {"sensitive": False, "type": "string", "value": "s3cr3t-value-2"}
    run = run_tool(document)
    assert run.returncode == 0, run.stderr
    assert "s3cr3t" not in run.stdout
    assert "withheld: ci_token, grafana_admin" in run.stdout


def test_reads_a_file_argument(tmp_path: Path) -> None:
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(terraform_json(SAMPLE_VALUES["eks"])))
    run = subprocess.run([sys.executable, str(TOOL), str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "airflow variables set raylift_eks_cluster raylift-eks" in run.stdout


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ("raylift_target = ecs", "not JSON"),
        (json.dumps({"region": "us-west-2"}), "expected {name: {value"),
        (json.dumps(terraform_json({"region": "us-west-2"})), "output raylift_target is None"),
        (json.dumps(terraform_json({"raylift_target": "ecs"})), "output 'region' is missing"),
    ],
)
def test_refuses_what_is_not_a_raylift_stack(document: str, message: str) -> None:
    run = run_tool(document)
    assert run.returncode == 2
    assert message in run.stderr
    assert run.stdout == ""
