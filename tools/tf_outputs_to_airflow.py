#!/usr/bin/env python3
"""Turn ``terraform output -json`` of a raylift stack into Airflow CLI commands.

Why: raylift reads its cloud settings from Airflow (a connection for the region, variables for names),
and copying a dozen names by hand is where typos come from. This prints the commands; it runs nothing.

    terraform -chdir=terraform/examples/ecs output -json | python tools/tf_outputs_to_airflow.py | sh

What it prints:
  * ``airflow connections add <aws_conn_id> --conn-type aws --conn-extra '{"region_name": ...}'``:
    region only. Credentials never go into Airflow: the hooks use the default AWS credential chain.
  * ``airflow variables set raylift_<output> <value>`` for every output (lists and maps as JSON).
  * ``airflow variables set --json raylift_target_options '<json>'``: the ``target_options``
    object the raylift_deploy DAG takes for this stack, in raylift's option names (``region_name``,
    ``bucket`` + ``model_prefix``, ``ecr_repository``, ``cloud_map_namespace``, ``cluster_name``,
    ``worker_nodegroup``, ``endpoint``...): the targets refuse the stack's own names.

Outputs marked sensitive, or whose name looks like a credential, are never printed.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TextIO

VARIABLE_PREFIX = "raylift_"
SECRET_NAME = re.compile(r"(password|secret|token|private_key|access_key|credential|kubeconfig)", re.IGNORECASE)

# terraform output -> key of the DAG's ``target_options`` (per target), in raylift's spelling (the targets refuse
# the stacks' names); outputs not listed stay variables only. ``model_store_uri``, ``ecr_repository_url`` and
# ``eks_nodegroups`` are converted by TARGET_VALUES below.
TARGET_OPTIONS: dict[str, dict[str, str]] = {
    "ecs": {
        "region": "region_name",
        "image_tag": "image_tag",
        "codebuild_project": "codebuild_project",
        "ecs_cluster": "cluster",
        "ecs_head_service": "head_service",
        "ecs_worker_service": "worker_service",
        "cloudmap_namespace": "cloud_map_namespace",
        "cloudmap_service": "cloud_map_service",
        # the user endpoint's Cloud Map service, which a blue/green release moves at its switch
        "cloudmap_endpoint_service": "endpoint_cloud_map_service",
        "gpus_per_node": "gpus_per_node",
        # the model staging task beside the cluster (null without the stack's staging_image: in_worker below)
        "ecs_staging_task_definition": "staging_task_definition",
    },
    "eks": {
        "region": "region_name",
        "codebuild_project": "codebuild_project",
        "eks_cluster": "cluster_name",
        "eks_namespace": "namespace",
        "eks_service_account": "service_account",
        # the internal load balancer in front of Serve: the default (cluster DNS) resolves only inside the cluster
        "eks_serve_endpoint": "endpoint",
        # the GatewayClass a blue/green release holds KubeRay's upgrade with (null without the stack's gateway)
        "eks_gateway_class": "gateway_class",
        # the model staging Job's service account and image (null without the stack's staging_image)
        "eks_staging_service_account": "staging_service_account",
        "staging_image": "staging_image",
    },
}

# The node group raylift scales for the workers, by key of the eks stack's ``eks_nodegroups`` output: the
# default profile gpu-vllm's (profile graviton: --nodegroup graviton; inf2: --nodegroup inferentia).
DEFAULT_NODEGROUP = "gpu"


class OutputsError(ValueError):
    """The input is not the JSON that ``terraform output -json`` prints for a raylift stack."""


def load_outputs(stream: TextIO) -> dict[str, dict[str, Any]]:
    try:
        outputs = json.load(stream)
    except json.JSONDecodeError as exc:
        raise OutputsError(f"not JSON ({exc}); pipe in `terraform output -json`, not `terraform output`") from None
    if not isinstance(outputs, dict) or not all(isinstance(v, dict) and "value" in v for v in outputs.values()):
        raise OutputsError("expected {name: {value, type, sensitive}} as printed by `terraform output -json`")
    return outputs


def public_values(outputs: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    """Values safe to print, and the names withheld (sensitive or credential-like)."""
    values, withheld = {}, []
    for name, output in sorted(outputs.items()):
        if output.get("sensitive") or SECRET_NAME.search(name):
            withheld.append(name)
        elif output["value"] is not None:
            values[name] = output["value"]
    return values, withheld


def variable_name(output: str) -> str:
    return output if output.startswith(VARIABLE_PREFIX) else VARIABLE_PREFIX + output


def target_options(target: str, values: dict[str, Any], *, nodegroup: str = DEFAULT_NODEGROUP) -> dict[str, Any]:
    """The stack's outputs as the target's ``target_options``, in raylift's names. The one place the stack's
    shapes are converted: ``model_store_uri`` (``s3://bucket/prefix``) -> ``bucket`` + ``model_prefix``,
    ``ecr_repository_url`` (``<registry>/<name>``) -> ``ecr_repository`` (the name), and ``eks_nodegroups``
    (``{key: name}``) -> ``worker_nodegroup`` (the group under ``nodegroup``)."""
    options = {key: values[out] for out, key in TARGET_OPTIONS[target].items() if out in values}
    uri = values.get("model_store_uri")
    if uri is not None:
        if not isinstance(uri, str) or not uri.startswith("s3://") or not uri[5:].split("/", 1)[0]:
            raise OutputsError(f"output model_store_uri must be s3://bucket[/prefix], got {uri!r}")
        bucket, _, prefix = uri[5:].partition("/")
        options["bucket"] = bucket
        options["model_prefix"] = prefix.strip("/") or "models"
    repo = values.get("ecr_repository_url")
    if repo is not None:
        if not isinstance(repo, str) or "/" not in repo:
            raise OutputsError(f"output ecr_repository_url must be <registry>/<repository>, got {repo!r}")
        options["ecr_repository"] = repo.split("/", 1)[1]
    groups = values.get("eks_nodegroups")
    if target == "eks" and groups is not None:
        if not isinstance(groups, dict) or nodegroup not in groups:
            keys = sorted(groups) if isinstance(groups, dict) else groups
            raise OutputsError(f"output eks_nodegroups has no {nodegroup!r} node group (it has {keys}): pass --nodegroup")
        options["worker_nodegroup"] = groups[nodegroup]
    # Without a staging image the stack has no staging task to run: raylift stages on the Airflow worker.
    remote = {"ecs": "staging_task_definition", "eks": "staging_image"}[target]
    if options.get(remote) is None:
        options = {k: v for k, v in options.items() if k not in ("staging_task_definition", "staging_image")}
        options["staging"] = "in_worker"
    return options


def commands(
    outputs: dict[str, dict[str, Any]],
    aws_conn_id: str = "aws_default",
    replace: bool = False,
    nodegroup: str = DEFAULT_NODEGROUP,
) -> list[str]:
    """The Airflow CLI lines for these outputs (shell-quoted)."""
    values, withheld = public_values(outputs)
    target = values.get("raylift_target")
    if target not in TARGET_OPTIONS:
        raise OutputsError(
            f"output raylift_target is {target!r}; expected one of {sorted(TARGET_OPTIONS)} "
            "(run this on terraform/examples/ecs or terraform/examples/eks)"
        )
    if "region" not in values:
        raise OutputsError("output 'region' is missing: the aws connection needs it")

    lines = [f"# raylift {target} stack: {len(values)} outputs" + (f"; withheld: {', '.join(withheld)}" if withheld else "")]
    extra = json.dumps({"region_name": values["region"]})
    if replace:
        lines.append(f"airflow connections delete {shlex.quote(aws_conn_id)} || true")
    lines.append(f"airflow connections add {shlex.quote(aws_conn_id)} --conn-type aws --conn-extra {shlex.quote(extra)}")
    for name, value in values.items():
        if isinstance(value, (dict, list)):
            lines.append(f"airflow variables set --json {variable_name(name)} {shlex.quote(json.dumps(value))}")
        else:
            lines.append(f"airflow variables set {variable_name(name)} {shlex.quote(str(value))}")
    options = target_options(target, values, nodegroup=nodegroup)
    options["aws_conn_id"] = aws_conn_id
    lines.append(
        f"airflow variables set --json {VARIABLE_PREFIX}target_options {shlex.quote(json.dumps(options, sort_keys=True))}"
    )
    return lines


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", nargs="?", help="terraform output -json saved to a file (default: stdin)")
    parser.add_argument("--aws-conn-id", default="aws_default", help="Airflow connection id to create")
    parser.add_argument("--replace", action="store_true", help="delete the connection first if it exists")
    parser.add_argument(
        "--nodegroup", default=DEFAULT_NODEGROUP,
        help="eks: key in eks_nodegroups of the node group raylift scales for the workers (gpu for profile "
        "gpu-vllm, graviton for graviton, inferentia for inf2; default %(default)s)",
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        if args.file:
            with Path(args.file).open() as handle:
                outputs = load_outputs(handle)
        else:
            outputs = load_outputs(sys.stdin)
        print("\n".join(commands(outputs, aws_conn_id=args.aws_conn_id, replace=args.replace, nodegroup=args.nodegroup)))
    except (OutputsError, OSError) as exc:
        print(f"tf_outputs_to_airflow: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
