"""What raylift's Params cost Airflow: CPU to serialize the raylift_deploy DAG and to validate its Params, with the
shipped schemas (draft-07, ``raylift.dag_params.JSON_SCHEMA_DRAFT``) against the same schemas without ``$schema``
(jsonschema then checks each against draft 2020-12's metaschema, its default).

Airflow validates every Param of a task (jsonschema's ``validate``: the schema against its draft's metaschema, then
the value) each time it serializes the DAG (twice per task: ``ParamsDict.__eq__`` and ``__repr__``) and when a task
runs; the DAG processor serializes on every parse, ``airflow dags test`` three times per run. Rounds alternate the two
variants in one process; CPU time (``time.process_time``), median of the rounds.

Writes bench/results/param_schema_cost.json.

    .cache/venvs/control/bin/python bench/param_schema_cost.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_deploy_dag() -> Any:
    sys.path.insert(0, str(ROOT / "plugins"))
    spec = importlib.util.spec_from_file_location("raylift_deploy_dag", ROOT / "dags/raylift_deploy.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.dag if hasattr(module, "dag") else next(v for v in vars(module).values() if type(v).__name__ == "DAG")


def schemas(dag: Any) -> list[dict[str, Any]]:
    """Every distinct Param schema object of the DAG and its tasks (tasks hold copies of the DAG's Params)."""
    found: dict[int, dict[str, Any]] = {}
    for holder in (dag, *dag.tasks):
        for key in holder.params:
            schema = holder.params.get_param(key).schema
            found[id(schema)] = schema
    return list(found.values())


def cpu_of(work: Callable[[], object], repeat: int) -> float:
    started = time.process_time()
    for _ in range(repeat):
        work()
    return (time.process_time() - started) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="serializations per round and variant")
    parser.add_argument("--out", default=str(ROOT / "bench/results/param_schema_cost.json"))
    args = parser.parse_args()
    os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="raylift-param-bench-"))

    from airflow.serialization.serialized_objects import DagSerialization

    from raylift.dag_params import JSON_SCHEMA_DRAFT

    dag = load_deploy_dag()
    every = schemas(dag)
    drafts = {s.get("$schema") for s in every}
    assert drafts == {JSON_SCHEMA_DRAFT}, f"not every Param names {JSON_SCHEMA_DRAFT}: {drafts}"

    def use(draft: str | None) -> None:
        for schema in every:
            if draft is None:
                schema.pop("$schema", None)
            else:
                schema["$schema"] = draft

    samples: dict[str, dict[str, list[float]]] = {v: {"serialize_s": [], "validate_s": []} for v in ("draft-07", "2020-12")}
    for _ in range(args.rounds):
        for variant, draft in (("draft-07", JSON_SCHEMA_DRAFT), ("2020-12", None)):
            use(draft)
            samples[variant]["serialize_s"].append(cpu_of(lambda: DagSerialization.serialize_dag(dag), args.repeat))
            samples[variant]["validate_s"].append(cpu_of(dag.params.validate, args.repeat * 10))
    use(JSON_SCHEMA_DRAFT)
    median = {v: {k: round(statistics.median(x), 4) for k, x in m.items()} for v, m in samples.items()}
    result = {
        "dag": dag.dag_id, "tasks": len(dag.tasks), "params": len(dag.params), "rounds": args.rounds,
        "repeat": args.repeat, "cpu_median_s": median,
        "ratio_2020_12_over_draft_07": {k: round(median["2020-12"][k] / median["draft-07"][k], 2)
                                        for k in ("serialize_s", "validate_s")},
        "samples": samples,
    }
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))


if __name__ == "__main__":
    main()
