"""Bad input fails the right step early, with a message naming the field — and touches nothing serving.

These run the real operator/target code paths; nothing is mocked. The engine-arg check runs vLLM in
the runtime environment, as the deploy task does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from raylift.errors import ModelSourceError, RayliftValueError, UnknownTargetError
from raylift.targets import get_target

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "dags"))


@pytest.fixture()
def local_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path))
    monkeypatch.setenv("RAYLIFT_DASHBOARD_PORT", "18999")  # nothing listens there
    return tmp_path


def deploy_dag():
    import raylift_deploy

    return raylift_deploy.dag


def validate(conf: dict) -> None:
    """What Airflow does with a trigger's conf: merge it into the DAG's Params and validate."""
    import copy

    params = copy.deepcopy(deploy_dag().params)
    params.update(conf)
    params.validate()


def test_unknown_target_names_the_choices() -> None:
    with pytest.raises(UnknownTargetError, match=r"'gcp'.*\['ecs', 'eks', 'local', 'ray'\]"):
        get_target("gcp")


def test_unknown_target_is_refused_by_the_params_form() -> None:
    with pytest.raises(Exception, match="target"):
        validate({"target": "gcp"})


@pytest.mark.parametrize(
    "conf, field",
    [
        ({"replicas": -1}, "replicas"),
        ({"replicas": 0}, "replicas"),  # Ray Serve's schema wants num_replicas > 0
        ({"workers": -2}, "workers"),
        ({"served_name": "bad name!"}, "served_name"),
        ({"served_name": "/leading-slash"}, "served_name"),
        ({"served_name": "org//model"}, "served_name"),
        ({"served_name": "org/model/"}, "served_name"),
        ({"max_seconds_per_level": 0}, "max_seconds_per_level"),
        ({"warmup_requests": -1}, "warmup_requests"),
        ({"engine_args": "max_model_len=5"}, "engine_args"),
        ({"slos": {"max_error_rate": 2}}, "slos"),
        ({"concurrency": [0]}, "concurrency"),
        ({"release": "blue-green"}, "release"),
        ({"on_inconclusive": "maybe"}, "on_inconclusive"),
        ({"max_cumulative_regression": -0.1}, "max_cumulative_regression"),
        ({"approval": {"timeout_minutes": 0}}, "approval"),
        ({"approval": {"default": "ignore"}}, "approval"),
        ({"approval": {"timeout": 5}}, "approval"),
    ],
)
def test_params_reject_bad_values_naming_the_field(conf: dict, field: str) -> None:
    with pytest.raises(Exception, match=field):
        validate(conf)


def test_good_params_validate() -> None:
    validate({"replicas": 1, "workers": 0, "concurrency": [1, 8]})
    validate({"release": "direct", "on_inconclusive": "fail", "max_cumulative_regression": 0.2,
              "approval": {"timeout_minutes": 5, "default": "approve"}})
    validate({"approval": {"timeout_minutes": 5}})  # the other key keeps its default


def test_the_inferentia2_llmperf_run_is_one_trigger_away() -> None:
    """Seed 004's llmperf run (Llama-2-13B on inf2, TP 8): its served name holds '/', 3072 ± 200 tokens in,
    512 ± 20 out, concurrency 22, 176 requests, a 1800 s timeout."""
    from raylift.measure.profiles import get_profile

    validate({"served_name": "meta-llama/Llama-2-13b-chat-hf", "benchmark_profile": "llmperf-inf2",
              "concurrency": [22], "requests_per_level": 176, "max_seconds_per_level": 1800})
    inf2 = get_profile("llmperf-inf2")
    assert (inf2.mean_input_tokens, inf2.stddev_input_tokens, inf2.mean_output_tokens,
            inf2.stddev_output_tokens) == (3072, 200, 512, 20)


def test_negative_replicas_refused_by_the_operator_too(local_home: Path) -> None:
    """The REST API can bypass the form's defaults; the operator checks again before touching anything."""
    from raylift.operators.deploy import ServeDeployOperator

    op = ServeDeployOperator(
        task_id="deploy", artifact={"digest": "x", "working_dir": "file:///x.zip"},
        model={"model_id": "m", "revision": "r", "uri": "/m", "manifest_uri": "/m/x"},
        served_name="s", replicas=-1,
    )
    with pytest.raises(RayliftValueError, match="'replicas' must be >= 0"):
        op.render()


def test_negative_workers_refused_before_any_process_starts(local_home: Path) -> None:
    from raylift.operators.cluster import ScaleClusterOperator

    with pytest.raises(RayliftValueError, match="'workers' must be >= 0"):
        ScaleClusterOperator(task_id="scale", workers=-1).execute({})
    assert not (local_home / "cluster").exists()


def test_nonexistent_model_path_fails_stage(local_home: Path) -> None:
    with pytest.raises(ModelSourceError, match="does not exist"):
        get_target("local").stage_model(source=str(local_home / "missing"), model_id="m")


def test_model_dir_without_weights_fails_stage(local_home: Path) -> None:
    model = local_home / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelSourceError, match="no weights"):
        get_target("local").stage_model(source=str(model), model_id="m")


def test_deploy_without_a_cluster_says_to_scale_first(local_home: Path) -> None:
    from raylift.errors import ClusterError

    with pytest.raises(ClusterError, match="run the scale step"):
        get_target("local").current_serve_config()


# What vLLM itself refuses in engine_args (an unknown field named, max_model_len over the model's limit) and what it
# accepts: tests/serve_apps/test_engine_args_check.py (each a vLLM import in the runtime env, ~20 s beside the suite).


@pytest.mark.parametrize("levels", [list(range(1, 10_001)), [1, 4, 4], [0], [1, 300]])
def test_unbounded_or_repeated_concurrency_levels_are_refused_by_the_form_and_the_benchmark(levels: list) -> None:
    """Issue 45 item 5: 10,000 concurrency levels were accepted (days of benchmark under the cluster's lease)."""
    from raylift.operators.benchmark import BenchmarkOperator

    with pytest.raises(Exception, match="concurrency"):
        validate({"concurrency": levels})
    op = BenchmarkOperator(task_id="benchmark", target="local", served_name="m", concurrency=levels)
    with pytest.raises(RayliftValueError, match=r"concurrency.*give 1 to 16 distinct whole numbers from 1 to 256"):
        op._levels()
    op.concurrency = ",".join(map(str, levels))  # as a template renders it
    with pytest.raises(RayliftValueError, match="give 1 to 16 distinct"):
        op._levels()


def test_a_boolean_that_is_neither_true_nor_false_is_refused_not_read_as_false() -> None:
    """Issue 45 item 5: a boolean 'maybe' was read as false (then regression_strict's; strict_flag reads them all)."""
    from raylift.config import strict_flag

    for value in ("maybe", "tru", 2, "null"):
        with pytest.raises(RayliftValueError, match=f"redeploy must be true or false, got {value!r}"):
            strict_flag(value, "redeploy", False)
    assert [strict_flag(v, "x", False) for v in (True, "true", " FALSE ", "1", 0, None, "")] == [
        True, True, False, True, False, False, False]


def test_a_run_naming_a_removed_param_is_refused_by_its_first_step() -> None:
    """regression_strict left raylift_deploy's Params (on_inconclusive: fail says it); a REST run or an old script
    that still sends it is refused before anything is built, not run with the option silently dropped."""
    from types import SimpleNamespace

    from raylift.operators.profile import HardwareProfileOperator

    op = HardwareProfileOperator(task_id="check_hardware_profile", target="local")
    run = SimpleNamespace(conf={"served_name": "m", "regression_strict": True})
    with pytest.raises(RayliftValueError, match=r"no longer has: regression_strict \(pass on_inconclusive: fail"):
        op.execute({"dag_run": run})
    assert op.execute({"dag_run": SimpleNamespace(conf={"served_name": "m"})})["serve_config"] == "llm-cpu.yaml"
    # the flat approval Params became one object: an old conf is told the new spelling
    old = SimpleNamespace(conf={"approval_timeout_minutes": 5, "approval_default": "approve"})
    with pytest.raises(RayliftValueError, match=r'approval_timeout_minutes \(pass approval: \{"timeout_minutes": N\}\);'
                       r' approval_default \(pass approval: \{"default"'):
        op.execute({"dag_run": old})
