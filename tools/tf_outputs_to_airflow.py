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
    object the raylift_deploy DAG takes for this stack.

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

# terraform output -> key of the DAG's ``target_options`` (per target); outputs not listed stay variables only.
TARGET_OPTIONS: dict[str, dict[str, str]] = {
    "ecs": {
        "region": "region",
        "model_store_uri": "model_store_uri",
        "ecr_repository_url": "image_repository",
        "image_tag": "image_tag",
        "codebuild_project": "codebuild_project",
        "ecs_cluster": "cluster",
        "ecs_head_service": "head_service",
        "ecs_worker_service": "worker_service",
        "cloudmap_namespace": "cloudmap_namespace",
        "cloudmap_service": "cloudmap_service",
        "gpus_per_node": "gpus_per_node",
    },
    "eks": {
        "region": "region",
        "model_store_uri": "model_store_uri",
        "ecr_repository_url": "image_repository",
        "codebuild_project": "codebuild_project",
        "eks_cluster": "cluster",
        "eks_nodegroups": "nodegroups",
        "eks_namespace": "namespace",
        "eks_service_account": "service_account",
    },
}


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


def commands(outputs: dict[str, dict[str, Any]], aws_conn_id: str = "aws_default", replace: bool = False) -> list[str]:
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
    options = {key: values[out] for out, key in TARGET_OPTIONS[target].items() if out in values}
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
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        if args.file:
            with Path(args.file).open() as handle:
                outputs = load_outputs(handle)
        else:
            outputs = load_outputs(sys.stdin)
        print("\n".join(commands(outputs, aws_conn_id=args.aws_conn_id, replace=args.replace)))
    except (OutputsError, OSError) as exc:
        print(f"tf_outputs_to_airflow: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
