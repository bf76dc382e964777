"""docs/infrastructure.md stays true: its sections exist, the paths it names exist, and every DAG conf
it shows uses only params the raylift_deploy DAG declares (and sets the ones the brief lists)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs/infrastructure.md").read_text()


def test_sections() -> None:
    headings = re.findall(r"^## (.+)$", DOC, re.MULTILINE)
    assert headings == ["Run on AWS ECS", "Run on EKS", "Ray's control plane", "Run the stack with Docker Compose"]


def test_named_paths_exist() -> None:
    paths = set(re.findall(r"(?:terraform/examples/\w+|tools/[\w.]+\.(?:py|sh)|images/[\w./-]+Dockerfile)", DOC))
    assert {"terraform/examples/ecs", "terraform/examples/eks", "tools/tf_outputs_to_airflow.py"} <= paths
    missing = [p for p in paths if not (ROOT / p).exists() and not p.startswith("images/")]
    assert missing == []


def test_dag_confs_use_declared_params() -> None:
    import json

    from raylift.dag_params import deploy_params
    from raylift.targets import get_target

    declared = set(deploy_params())
    confs = re.findall(r"dags trigger raylift_deploy --conf (.+?)\n```", DOC, re.DOTALL)
    assert len(confs) == 3
    targets = []
    for conf in confs:
        # the JSON object, with a shell substitution ($(airflow variables get ...)) read as an empty object
        literal = json.loads(re.sub(r"\$\([^)]*\)", "{}", conf[conf.index("{"):conf.rindex("}") + 1]))
        assert set(literal) <= declared, set(literal) - declared
        assert {"model_source", "replicas", "workers"} <= set(literal)
        if "served_name" not in literal:  # derived from the source (README's Params table): say so where it is left out
            assert "served_name" in conf and "the source's own name" in conf, conf
        # the cluster: a target with its options, or a raylift_cluster connection (tests/aws/test_docs_confs.py)
        assert ("target" in literal) != ("cluster_conn_id" in literal), literal
        targets.append(literal.get("target") or literal["cluster_conn_id"])
        if literal.get("target_options"):  # written out in the doc: the target takes them
            get_target(literal["target"], **literal["target_options"])
    assert targets == ["raylift-ecs", "raylift-eks", "ray"]
