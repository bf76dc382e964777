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
    from raylift.dag_params import deploy_params

    declared = set(deploy_params())
    confs = re.findall(r"dags trigger raylift_deploy --conf (.+?)\n```", DOC, re.DOTALL)
    assert len(confs) == 3
    targets = []
    for conf in confs:
        keys = set(re.findall(r'"(\w+)":', conf))
        assert keys <= declared, keys - declared
        assert {"target", "model_source", "model_id", "served_name", "replicas", "workers"} <= keys
        targets += re.findall(r'"target": "(\w+)"', conf)
    assert targets == ["ecs", "eks", "local"]
