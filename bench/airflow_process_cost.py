"""What raylift adds to every Airflow process, in CPU time: its Params and its plugin.

Params: CPU to serialize the raylift_deploy DAG and to validate its Params, with the shipped schemas (draft-07,
``raylift.dag_params.JSON_SCHEMA_DRAFT``) against the same schemas without ``$schema`` (jsonschema then checks each
against draft 2020-12's metaschema, its default).

Airflow validates every Param of a task (jsonschema's ``validate``: the schema against its draft's metaschema, then
the value) each time it serializes the DAG (twice per task: ``ParamsDict.__eq__`` and ``__repr__``) and when a task
runs; the DAG processor serializes on every parse, ``airflow dags test`` three times per run. Rounds alternate the two
variants in one process; CPU time (``time.process_time``), median of the rounds.

Plugin: Airflow loads plugins in every process (each task's runner, for macros). CPU of a fresh interpreter that
loads raylift's plugin as shipped (the reports app built on its first request) against one that also builds the app
(what loading it did before), alternating; the difference is what each process saves.

Writes bench/results/airflow_process_cost.json.

    .cache/venvs/control/bin/python bench/airflow_process_cost.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_deploy_dag() -> Any:
    """raylift_deploy as Airflow's own DagBag parses it."""
    from airflow.dag_processing.dagbag import DagBag

    sys.path.insert(0, str(ROOT / "plugins"))
    bag = DagBag(dag_folder=str(ROOT / "dags/raylift_deploy.py"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags["raylift_deploy"]


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


PLUGIN_LOAD = "import raylift.plugin as p; app = p.RayliftPlugin.fastapi_apps[0]['app']"


def child_cpu(code: str) -> float:
    """CPU seconds (user + system) of a fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "plugins")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="serializations per round and variant")
    parser.add_argument("--out", default=str(ROOT / "bench/results/airflow_process_cost.json"))
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

    plugin: dict[str, list[float]] = {"as_shipped": [], "app_built_on_load": []}
    for _ in range(args.rounds):
        plugin["as_shipped"].append(child_cpu(PLUGIN_LOAD))
        plugin["app_built_on_load"].append(child_cpu(PLUGIN_LOAD + "; app.app"))
    plugin_median = {k: round(statistics.median(v), 3) for k, v in plugin.items()}
    result = {
        "dag": dag.dag_id, "tasks": len(dag.tasks), "params": len(dag.params), "rounds": args.rounds,
        "repeat": args.repeat, "cpu_median_s": median,
        "ratio_2020_12_over_draft_07": {k: round(median["2020-12"][k] / median["draft-07"][k], 2)
                                        for k in ("serialize_s", "validate_s")},
        "plugin_load_cpu_median_s": plugin_median,
        "plugin_load_saved_s": round(plugin_median["app_built_on_load"] - plugin_median["as_shipped"], 3),
        "samples": samples, "plugin_samples": plugin,
    }
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=2))


if __name__ == "__main__":
    main()
