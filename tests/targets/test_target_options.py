"""Every target's ``target_options`` are typed, with one spelling per key: the terraform stacks' names are
refused with raylift's, wrong types and values name the key, what was given and what is expected, unknown keys
list the allowed ones, and all of it happens when the target is built, before anything is called."""

from __future__ import annotations

import json
from typing import Any

import pytest

from raylift.errors import RayliftValueError
from raylift.targets import get_target
from tests.fixtures.http_standin import JsonHandler, serve_http

# Enough for each target to be built: what a user must set.
REQUIRED: dict[str, dict[str, Any]] = {
    "local": {},
    "ray": {"dashboard_url": "http://ray-head:8265", "serve_url": "http://ray-head:8000"},
    "ecs": {"cluster": "ray", "bucket": "models", "head_address": "10.0.0.5"},
    "eks": {"cluster_name": "ray", "worker_nodegroup": "gpu", "bucket": "models"},
}

# the spellings raylift took before (the terraform stacks' names) -> the option to use instead
OLD_SPELLINGS = [
    ("ecs", "cloudmap_namespace", "ray.local", "'cloud_map_namespace'"),
    ("ecs", "cloudmap_service", "head", "'cloud_map_service'"),
    ("ecs", "region", "us-west-2", "'region_name'"),
    ("ecs", "image_repository", "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm", "'ecr_repository'"),
    ("ecs", "model_store_uri", "s3://models/models", "'bucket' and 'model_prefix'"),
    ("eks", "cluster", "ray", "'cluster_name'"),
    ("eks", "nodegroups", {"gpu": "gpu"}, "'worker_nodegroup'"),
    ("eks", "region", "us-west-2", "'region_name'"),
    ("eks", "image_repository", "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm", "'ecr_repository'"),
    ("eks", "model_store_uri", "s3://models/models", "'bucket' and 'model_prefix'"),
]


def build(target: str, **options: Any) -> Any:
    return get_target(target, **json.loads(json.dumps(REQUIRED[target] | options)))  # plain JSON, as the DAG passes


@pytest.mark.parametrize("target", sorted(REQUIRED))
def test_the_required_options_are_enough_and_the_defaults_are_kept(target: str) -> None:
    made = build(target)
    assert made.options.model_dump(exclude_unset=True) == REQUIRED[target]
    defaults = made.options.model_dump()
    if target in ("ecs", "eks"):
        assert (defaults["aws_conn_id"], defaults["model_prefix"], defaults["ecr_repository"]) == (
            "aws_default", "models", "ray-vllm")
        assert (defaults["build_poll_interval_s"], defaults["build_timeout_s"]) == (15.0, 3600.0)
    if target == "ecs":
        assert (made.dashboard_port, made.serve_port, made.cloud_map_service) == (8265, 8000, "head")
        assert (made.head_gpus, made.worker_gpus, made.scale_timeout_s) == (4.0, 4.0, 900.0)
    if target == "eks":
        assert (made.profile, made.upgrade_strategy, made.default_workers, made.namespace) == (
            "gpu-vllm", "NewCluster", 1, "raylift")
    if target in ("local", "ray"):
        assert made.aws_conn_id == "aws_default" and made.hf_conn_id is None


@pytest.mark.parametrize(("target", "old", "value", "use"), OLD_SPELLINGS)
def test_an_old_spelling_is_refused_with_the_name_to_use(target: str, old: str, value: Any, use: str) -> None:
    with pytest.raises(RayliftValueError) as refused:
        build(target, **{old: value})
    assert f"target option {old!r} is not raylift's spelling: use {use}" in str(refused.value)


def test_an_old_spelling_is_refused_even_when_it_agrees_with_raylifts() -> None:
    """Two spellings of one key are not taken even when they agree: one spelling, so one place to look."""
    with pytest.raises(RayliftValueError, match="'cloudmap_namespace' is not raylift's spelling: use 'cloud_map_namespace'"):
        build("ecs", cloud_map_namespace="ray.local", cloudmap_namespace="ray.local")
    with pytest.raises(RayliftValueError, match="'cluster' is not raylift's spelling: use 'cluster_name'"):
        build("eks", cluster="ray")


@pytest.mark.parametrize(
    ("target", "options", "message"),
    [
        ("ecs", {"dashboard_port": "eighty"}, "target option 'dashboard_port' got 'eighty' (str): input should be a valid integer"),
        ("ecs", {"dashboard_port": "8265"}, "'dashboard_port' got '8265' (str)"),  # JSON types: a port is a number
        ("ecs", {"serve_port": 70000}, "'serve_port' got 70000 (int): input should be less than or equal to 65535"),
        ("ecs", {"bucket": 3}, "target option 'bucket' got 3 (int): input should be a valid string"),
        ("ecs", {"gpus_per_node": -1}, "'gpus_per_node' got -1 (int): input should be greater than or equal to 0"),
        ("ecs", {"scale_timeout_s": 0}, "'scale_timeout_s' got 0 (int): input should be greater than 0"),
        ("ecs", {"bucket": "s3://models/x"}, "target option 'bucket' must be a bucket name, got 's3://models/x'"),
        ("ecs", {"ecr_repository": "123456789012.dkr.ecr.us-west-2.amazonaws.com/ray-vllm"},
         "'ecr_repository' must be an ECR repository name"),
        ("ecs", {"head_address": None}, "needs 'head_address' or 'cloud_map_namespace'"),
        ("eks", {"bucket": 3}, "target option 'bucket' got 3 (int): input should be a valid string"),
        ("eks", {"workers": True}, "'workers' got True (bool): input should be a valid integer"),
        ("eks", {"accelerators_per_node": 0}, "'accelerators_per_node' got 0 (int)"),
        ("eks", {"profile": "gpu"}, "target option 'profile' got 'gpu': use one of ['cpu-x86', 'gpu-vllm', 'graviton', 'inf2']"),
        ("eks", {"upgrade_strategy": "Rolling"}, "target option 'upgrade_strategy' got 'Rolling': use one of"),
        ("eks", {"worker_nodegroup": None}, "target option 'worker_nodegroup' got None (NoneType)"),
        ("local", {"model_store": 3}, "target option 'model_store' got 3 (int): input should be a valid string"),
        ("local", {"aws_conn_id": ["aws_default"]}, "target option 'aws_conn_id' got ['aws_default'] (list)"),
        ("ray", {"dashboard_url": 8265}, "target option 'dashboard_url' got 8265 (int): input should be a valid string"),
        ("ray", {"serve_url": "ray-head:8000"}, "needs target_options.serve_url as scheme://host:port only"),
    ],
)
def test_a_wrong_type_or_value_is_refused_naming_the_key(target: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(RayliftValueError) as refused:
        build(target, **options)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("target", "missing", "message"),
    [
        ("ecs", "cluster", "target 'ecs' needs target_options.cluster, the ECS cluster's name"),
        ("ecs", "bucket", "target 'ecs' needs target_options.bucket"),
        ("eks", "cluster_name", "target 'eks' needs target_options.cluster_name"),
        ("eks", "worker_nodegroup", "target 'eks' needs target_options.worker_nodegroup"),
        ("ray", "dashboard_url", "target 'ray' needs target_options.dashboard_url, an http(s) URL with a host"),
    ],
)
def test_a_missing_option_is_named(target: str, missing: str, message: str) -> None:
    options = {k: v for k, v in REQUIRED[target].items() if k != missing}
    with pytest.raises(RayliftValueError) as refused:
        get_target(target, **options)
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("target", "allowed"),
    [
        ("local", "use aws_conn_id, hf_conn_id, model_store, runtime_python (ports and paths"),
        ("ray", "use dashboard_url, serve_url, aws_conn_id, hf_conn_id, model_store."),
        ("ecs", "use bucket, cluster, artifacts_prefix, aws_conn_id, "),
        ("eks", "use bucket, cluster_name, worker_nodegroup, accelerators_per_node, "),
    ],
)
def test_unknown_keys_are_refused_with_the_allowed_ones(target: str, allowed: str) -> None:
    with pytest.raises(RayliftValueError) as refused:
        build(target, colour="red", nodes=3)
    message = str(refused.value)
    assert f"target_options ['colour', 'nodes'] are not options of the {target} target: {allowed}" in message
    model = type(build(target).options)
    assert all(name in message for name in model.model_fields)  # every option is listed


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(RayliftValueError) as refused:
        build("ecs", dashboard_port="eighty", bucket=3, colour="red")
    message = str(refused.value)
    assert "['colour']" in message and "'dashboard_port' got 'eighty'" in message and "'bucket' got 3" in message


def test_refused_when_built_before_anything_is_called() -> None:
    """A refused option fails the step at get_target: the cluster it names is never called."""
    seen: list[str] = []

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self._json({})

        do_PUT = do_DELETE = do_POST = do_GET

    with serve_http(Handler) as port:
        url = f"http://127.0.0.1:{port}"
        with pytest.raises(RayliftValueError, match="'region' is not raylift's spelling"):
            get_target("ecs", cluster="ray", bucket="b", head_address="127.0.0.1", dashboard_port=port, region="x")
        with pytest.raises(RayliftValueError, match=r"\['address'\] are not options of the ray target"):
            get_target("ray", dashboard_url=url, serve_url=url, address="127.0.0.1")
    assert seen == []
