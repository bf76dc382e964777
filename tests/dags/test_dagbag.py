"""The DAG files as Airflow's own DagBag parses them: no import errors, cheap to parse, nothing heavy imported.

The DAG processor re-parses every file every 30 s, so a parse must import only what declares tasks. The parse
runs in a fresh interpreter: this test process has long since imported boto3, kubernetes and the rest.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAG_IDS = {"raylift_deploy", "raylift_redeploy", "raylift_stage_model", "raylift_teardown", "raylift_undeploy"}
# What a parse must never import: cloud SDKs, the Ray/vLLM client side, HTTP clients, numeric stacks, and
# raylift's own concrete targets, hooks and benchmark (they pull those in; the target registry and interface
# in ``raylift.targets``/``raylift.targets.base`` are light by design). ruff's TID253 bans the third-party ones
# at DAG files' top level too.
HEAVY = ("boto3", "botocore", "kubernetes", "ray", "vllm", "torch", "httpx", "aiohttp", "scipy", "numpy",
         "jsonschema", "raylift.targets.local", "raylift.targets.ecs", "raylift.targets.eks",
         "raylift.targets.ray_cluster", "raylift.targets.aws", "raylift.hooks", "raylift.measure")  # fmt: skip
PARSE_BOUND_S = 2.0  # per file; measured 0.003-0.2 s here (the first file pays for the shared imports)

PARSE = """
import json, sys, time
from airflow.dag_processing.dagbag import DagBag
baseline = set(sys.modules)
started = time.perf_counter()
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "dag_ids": sorted(bag.dag_ids),
    "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "seconds": {s.file: s.duration.total_seconds() for s in bag.dagbag_stats},
    "total_s": time.perf_counter() - started,
    "imported": sorted(set(sys.modules) - baseline),
    "deferrable": {f"{d.dag_id}.{t.task_id}": t.deferrable for d in bag.dags.values() for t in d.tasks
                   if isinstance(getattr(t, "deferrable", None), bool)},
    "param_drafts": {f"{d.dag_id}.{k}": d.params.get_param(k).schema.get("$schema") for d in bag.dags.values()
                     for k in d.params},
    "param_defaults": {d.dag_id: {k: d.params.get_param(k).value for k in d.params} for d in bag.dags.values()},
    "param_sections": {d.dag_id: {k: d.params.get_param(k).schema.get("section") for k in d.params}
                       for d in bag.dags.values()},
    "task_classes": {d.dag_id: {t.task_id: f"{type(t).__module__}:{type(t).__qualname__}" for t in d.tasks}
                     for d in bag.dags.values()},
}, default=str))
"""


def parse(tmp_path_factory: pytest.TempPathFactory, **env_extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "plugins"), str(REPO)]),
           "AIRFLOW_HOME": str(tmp_path_factory.mktemp("airflow-home")), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           **env_extra}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", PARSE, str(REPO / "dags")], env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return parse(tmp_path_factory, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="True")


def test_every_dag_file_parses_without_import_errors(parsed: dict) -> None:
    assert parsed["import_errors"] == {}
    assert set(parsed["dag_ids"]) == DAG_IDS


def test_each_file_parses_within_the_bound(parsed: dict) -> None:
    assert parsed["seconds"], "DagBag reported no per-file parse times"
    slow = {Path(f).name: round(s, 2) for f, s in parsed["seconds"].items() if s > PARSE_BOUND_S}
    assert not slow, f"DAG files parsing slower than {PARSE_BOUND_S} s: {slow}"


def test_a_parse_imports_nothing_heavy(parsed: dict) -> None:
    heavy = sorted(m for m in parsed["imported"] if any(m == h or m.startswith(f"{h}.") for h in HEAVY))
    assert not heavy, f"parsing the DAG files imported {heavy[:12]}: import them inside the task instead"


def test_every_param_names_the_draft_that_is_cheap_to_check(parsed: dict) -> None:
    """Airflow checks each Param's schema against its draft's metaschema every time it serializes a DAG or runs a
    task; draft 2020-12's (jsonschema's default when a schema names none) cost 3.2x draft-07's
    (bench/airflow_process_cost.py), so every raylift Param is made by ``raylift.dag_params.param``."""
    from raylift.dag_params import JSON_SCHEMA_DRAFT

    assert parsed["param_drafts"], "no Params found"
    other = {name: draft for name, draft in parsed["param_drafts"].items() if draft != JSON_SCHEMA_DRAFT}
    assert not other, f"Params not made by raylift.dag_params.param: {other}"


def test_every_wait_follows_default_deferrable(parsed: dict, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No task hard-codes ``deferrable``: each one that can defer (raylift's deploy, build and cluster waits, the
    redeploy's TriggerDagRunOperator) takes Airflow's ``[operators] default_deferrable``, both ways."""
    assert parsed["deferrable"], "no task with a deferrable setting found"
    assert {task for task, on in parsed["deferrable"].items() if not on} == set()
    off = parse(tmp_path_factory, AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="False")["deferrable"]
    assert set(off) == set(parsed["deferrable"]) and {task for task, on in off.items() if on} == set()
