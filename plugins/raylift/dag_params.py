"""The Params (JSON schema) of raylift's DAGs: one definition, shared by the trigger form and the REST API.

The DAGs render templates as native objects, and Jinja's native rendering reads a rendered string as a Python
literal (``jinja2.nativetypes.native_concat``: ``ast.literal_eval``): ``"{{ params.revision }}"`` turned revision
``"2024"`` into the int 2024. A string Param is therefore handed to its operator as ``"{{ params.<name> | pprint }}"``
(its repr, which the literal reading turns back into the same string; null stays None):
tests/dags/test_string_params.py checks every DAG's string Params.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from raylift.config import (
    MAX_BENCHMARK_LEVEL_TIMEOUT_S,
    MAX_CONCURRENCY,
    MAX_CONCURRENCY_LEVELS,
    MAX_DEPLOY_TIMEOUT_S,
    MIN_DEPLOY_TIMEOUT_S,
    REGRESSION_MIN_REQUESTS,
    SCHEDULED_ON_INCONCLUSIVE,
    local_settings,
    param_default,
)
from raylift.targets import TARGETS

# jsonschema checks a schema against its draft's metaschema on every validation, and Airflow validates every Param of
# a task each time it serializes the DAG (the DAG processor's every parse, each `dags test`) or runs a task. Against
# draft 2020-12's metaschema (jsonschema's default) that check cost raylift_deploy's serialization 1.02 s of CPU;
# against draft-07's, 0.32 s (bench/airflow_process_cost.py). The schemas here use only keywords both drafts read alike.
JSON_SCHEMA_DRAFT = "http://json-schema.org/draft-07/schema#"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
# A served model name as hubs spell them ("meta-llama/Llama-2-13b-chat-hf"): segments joined by single "/"
SERVED_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)*$"


# The trigger form's sections (Airflow's ``section``), in the order a run is read: where it goes, which model, how it
# serves, how it is measured, how it is released. A Param named nowhere here stays in Airflow's default section.
SECTIONS: dict[str, tuple[str, ...]] = {
    "Where": ("cluster_conn_id", "target", "target_options"),
    "Model": ("model_source", "model_id", "revision", "hub_allow_patterns", "hub_ignore_patterns", "served_name"),
    "Serving": ("app_name", "serve_config", "route_prefix", "replicas", "surge_replicas", "autoscaling", "workers",
                "engine_args", "app_args", "deploy_timeout_s"),
    "Benchmark": ("benchmark_profile", "concurrency", "requests_per_level", "max_seconds_per_level", "cost", "sweep",
                  "warmup_requests", "slos"),
    "Release": ("release", "max_regression", "max_cumulative_regression", "regression_confidence", "on_inconclusive",
                "approval", "regression_baseline"),
}
SECTION_OF = {name: section for section, names in SECTIONS.items() for name in names}


def param(default: Any, description: str | None = None, **schema: Any) -> Param:
    """An Airflow Param whose JSON schema names draft-07 (see JSON_SCHEMA_DRAFT); keywords as ``Param``'s."""
    return Param(default, description=description, schema={"$schema": JSON_SCHEMA_DRAFT, **schema})


def in_sections(params: dict[str, Param]) -> dict[str, Param]:
    """The Params with their trigger-form section (``SECTIONS``) set in each schema (the form groups by it)."""
    for name, p in params.items():
        if name in SECTION_OF:
            p.schema["section"] = SECTION_OF[name]
    return params


def default_model_source() -> str:
    """The tiny model `make demo` generates; any local path, s3:// prefix or hub repo id works."""
    return str(local_settings().home / "models" / "tiny-llama")


def target_params() -> dict[str, Param]:
    return in_sections({
        "cluster_conn_id": param(
            param_default("cluster_conn_id"), type=["null", "string"], pattern=NAME_PATTERN,
            description="The cluster, by Airflow connection id (type raylift_cluster: its kind, where it is, its Ray "
            "token, its state store). null: the target Param with target_options (local needs nothing).",
        ),
        "target": param(param_default("target"), type="string", enum=sorted(TARGETS),
                        description="Where to deploy when no cluster connection is named (with one: its kind)"),
        "target_options": param(
            param_default("target_options"),
            type="object",
            description="Target-specific options (ECS/EKS: cluster, services, bucket, conn ids...; ray, a Ray cluster "
            "raylift did not start: dashboard_url and serve_url). Empty for local.",
        ),
    })


def deploy_params() -> dict[str, Param]:
    slo_number = {"type": ["number", "null"], "minimum": 0}
    params: dict[str, Any] = {
        **target_params(),
        "model_source": param(
            default_model_source(),
            type="string",
            minLength=1,
            description="Local path, file://, s3://bucket/prefix, or a hub repo id (org/name)",
        ),
        # a folder per '/' part in the model store: bounded here so a name too long for a file system is refused at
        # trigger time, not with ENAMETOOLONG mid-run (the hub's own parts are at most 96 characters)
        "model_id": param(param_default("model_id"), type=["null", "string"], minLength=1, maxLength=256,
                          pattern=r"^[^/]{1,128}(/[^/]{1,128})*$",
                          description="Name in the model store (null: the source's own: a hub repo id, else its last "
                          "path segment); at most 256 characters, 128 a '/'-part"),
        "revision": param(param_default("revision"), type=["string", "null"], description="Hub revision / tag (empty: default)"),
        "hub_allow_patterns": param(
            param_default("hub_allow_patterns"), type=["null", "array"], items={"type": "string"},
            description="Hub sources: only files matching these globs (null: all), e.g. [\"*.json\", \"*Q4_K_M.gguf\"]",
        ),
        "hub_ignore_patterns": param(
            param_default("hub_ignore_patterns"), type=["null", "array"], items={"type": "string"},
            description="Hub sources: skip files matching these globs. null: skip duplicate weight formats "
            "(*.bin, *.pth, original/*, *.gguf... when *.safetensors exist); []: take every file",
        ),
        "served_name": param(
            param_default("served_name"), type=["null", "string"], pattern=SERVED_NAME_PATTERN, maxLength=128,
            description="Model name clients send in requests (null: model_id, as vLLM names what it serves; may hold "
            "'/', e.g. meta-llama/Llama-2-13b-chat-hf)",
        ),
        "app_name": param(param_default("app_name"), type="string", pattern=NAME_PATTERN, description="Serve application"),
        "serve_config": param(
            param_default("serve_config"), type="string", pattern=r"^(auto|[A-Za-z0-9._-]+\.ya?ml)$",
            description="Base Serve config in serve_apps/configs/: picks the app (llm-*, translator-*, llamacpp-*) "
            "and its hardware profile (cpu, gpu, gpu-tp4, gpu-pp3-tp4, neuron, graviton). auto: follow the cluster's "
            "instances (ECS/EKS, from EC2's instance-type data: llm-gpu.yaml on NVIDIA GPUs, llm-neuron.yaml on "
            "Inferentia/Trainium, llamacpp-graviton.yaml on Graviton, else llm-cpu.yaml; local and ray: llm-cpu.yaml). "
            "A named profile the cluster's instances cannot run is refused before anything is applied",
        ),
        "route_prefix": param(
            param_default("route_prefix"), type=["null", "string"], pattern=r"^/[A-Za-z0-9._/-]*$",
            description="Where the app answers (null: the config's, usually /); give apps sharing a cluster their own. "
            "Normalised: /foo/ is /foo, // is /",
        ),
        "replicas": param(param_default("replicas"), type="integer", minimum=1, maximum=64,
                          description="Serve replicas of the model (Ray Serve needs at least 1; raylift_undeploy removes an app)"),
        "surge_replicas": param(
            param_default("surge_replicas"), type="integer", minimum=0, maximum=8,
            description="Replicas a code update (new weights, engine args, package) starts beside the old ones before "
            "stopping them: start-before-stop, no request fails. 0: stop-before-start, for a cluster with no room for "
            "one more replica; Serve then stops old replicas before the new ones load, and a 1-replica app is dark "
            "for its whole model load (the deploy logs how long)",
        ),
        "deploy_timeout_s": param(
            param_default("deploy_timeout_s"), type="integer", minimum=MIN_DEPLOY_TIMEOUT_S,
            maximum=MAX_DEPLOY_TIMEOUT_S,
            description="Seconds the deploy (and promote's rollout) waits for the app to be RUNNING before the run "
            "rolls back; the rollback waits as long for the app it puts back, and an EKS blue/green switch for "
            "KubeRay. Raise it where a replica takes long to start: a Neuron compile, a new GPU node pulling a "
            "multi-GB image (every target honours it)",
        ),
        "autoscaling": param(
            param_default("autoscaling"),
            type="object",
            properties={
                "target_ongoing_requests": {"type": "number", "exclusiveMinimum": 0},
                "max_ongoing_requests": {"type": "integer", "minimum": 1},
                "min_replicas": {"type": "integer", "minimum": 0},
                "initial_replicas": {"type": ["integer", "null"], "minimum": 0},
                "max_replicas": {"type": "integer", "minimum": 1},
                "downscale_delay_s": {"type": "number", "minimum": 0},
                "upscale_delay_s": {"type": "number", "minimum": 0},
            },
            additionalProperties=False,
            description="Serve autoscaling instead of fixed replicas ({}: off). KubeRay seed: "
            '{"target_ongoing_requests": 2, "max_ongoing_requests": 5, "min_replicas": 0, "max_replicas": 5, '
            '"downscale_delay_s": 600}',
        ),
        "workers": param(param_default("workers"), type="integer", minimum=0, maximum=64, description="Ray worker nodes besides the head"),
        "engine_args": param(
            param_default("engine_args"), type="object",
            description="Extra engine args: vLLM's for llm-*.yaml (e.g. {\"max_model_len\": 2048}), "
            "llama_cpp.Llama's for llamacpp-*.yaml (e.g. {\"n_ctx\": 2048}); none for the translator",
        ),
        "app_args": param(
            param_default("app_args"), type="object",
            description="Extra args for the Serve app (e.g. {\"default_max_tokens\": 128, \"frontend_args\": {\"response_role\": \"assistant\"}})",
        ),
        "benchmark_profile": param(
            param_default("benchmark_profile"), type="string", enum=["smoke", "short", "llmperf-inf2"], description="Request size profile"
        ),
        "concurrency": param(
            param_default("concurrency"), type="array", items={"type": "integer", "minimum": 1, "maximum": MAX_CONCURRENCY}, minItems=1,
            maxItems=MAX_CONCURRENCY_LEVELS, uniqueItems=True,
            description=f"Concurrency levels to measure (1 to {MAX_CONCURRENCY_LEVELS} distinct levels, each 1 to "
            f"{MAX_CONCURRENCY})",
        ),
        "requests_per_level": param(param_default("requests_per_level"), type="integer", minimum=1, maximum=2000, description="Requests per level"),
        "max_seconds_per_level": param(
            param_default("max_seconds_per_level"), type="number", exclusiveMinimum=0,
            maximum=MAX_BENCHMARK_LEVEL_TIMEOUT_S,
            description="Each level's time bound in seconds (llmperf's --timeout); requests still running then "
            "are cut off and counted apart",
        ),
        "cost": param(
            param_default("cost"),
            type="object",
            properties={
                "region": {"type": "string", "minLength": 1},
                "prices": {"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
            },
            additionalProperties=False,
            description="Cost of the run: AWS region of the price table (default: the target's, else us-east-1) "
            "and USD per instance-hour overrides, e.g. {\"prices\": {\"local\": 0.5, \"g5.xlarge\": 0.8}} "
            "(a negotiated rate, or a figure for this machine: 'local' is 0 by default)",
        ),
        "sweep": param(
            param_default("sweep"),
            type="object",
            properties={
                "start": {"type": "integer", "minimum": 1},
                "factor": {"type": "integer", "minimum": 2},
                "max_concurrency": {"type": "integer", "minimum": 1, "maximum": 1024},
                "min_gain": {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
            },
            additionalProperties=False,
            description="Saturation sweep instead of 'concurrency' ({}: off): from start (1), times factor (2), until "
            "output tokens/s grows less than min_gain (0.05) or an SLO breaks, at most max_concurrency (64); the "
            "report marks the knee. E.g. {\"max_concurrency\": 32}",
        ),
        "warmup_requests": param(
            param_default("warmup_requests"), type="integer", minimum=0, maximum=1000,
            description="Untimed requests sent before the measured ones (e.g. to fill caches and compile paths)",
        ),
        "slos": param(
            param_default("slos"),
            type="object",
            properties={
                "max_ttft_p99_ms": slo_number,
                "min_output_tokens_per_s": slo_number,
                "max_error_rate": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            },
            additionalProperties=False,
            description="Release gates; null = not checked",
        ),
        "release": param(
            param_default("release"), type="string", enum=["canary", "direct"],
            description="canary: a changed app starts as <app>-canary beside the serving one, is measured with it in "
            "the same rounds, and replaces it only if the gate promotes it (no user request meets a rejected "
            "candidate). direct: applied to the app itself and judged against the anchor's samples from another "
            "moment. A first deploy is always direct. A change the serving cluster cannot run (a new image, a local "
            "runtime_python, a new EKS rayClusterConfig) is released blue/green under canary (a second cluster, the "
            "endpoint switched on promote) and in place under direct (an announced outage on ECS)",
        ),
        "max_regression": param(
            param_default("max_regression"), type="number", minimum=0, exclusiveMaximum=1,
            description="Regression gate: the largest slowdown of a metric (latency up, tokens/s down) allowed "
            "against what serves (a fraction). Levels with fewer than "
            f"{REGRESSION_MIN_REQUESTS} finished requests fail the gate",
        ),
        "max_cumulative_regression": param(
            param_default("max_cumulative_regression"), type="number", minimum=0, maximum=10,
            description="Regression gate: the largest slowdown allowed since the anchor (the last release whose "
            "verdict was a pass), this release's change chained onto those promoted since it",
        ),
        "regression_confidence": param(
            param_default("regression_confidence"), type="number", minimum=0.5, exclusiveMaximum=1,
            description="Regression gate: confidence of each metric's interval for the change "
            "(Mann-Whitney / Hodges-Lehmann on per-request samples; see docs/benchmark-metrics.md)",
        ),
        "on_inconclusive": param(
            param_default("on_inconclusive"), type="string", enum=["hold", "pass", "fail"],
            description="What an inconclusive verdict does: hold (an approval step in Required Actions / the REST "
            "API), pass (promote; the anchor stays), fail (roll back). raylift_redeploy passes "
            f"{SCHEDULED_ON_INCONCLUSIVE} (nobody is there to answer a hold)",
        ),
        "approval": param(
            param_default("approval"), type="object", additionalProperties=False,
            properties={"timeout_minutes": {"type": "number", "exclusiveMinimum": 0, "maximum": 1440},
                        "default": {"type": "string", "enum": ["approve", "reject"]}},
            description="A held release (on_inconclusive: hold): how long it waits for a person (timeout_minutes), "
            "and its outcome when nobody answers in time (default: approve or reject); a key left out keeps its "
            "default",
        ),
        "regression_baseline": param(
            param_default("regression_baseline"), type="string", enum=["last_good", "none"],
            description="last_good: judge against the anchor (direct) and chain changes since it (canary). none: "
            "start a new anchor (after the cluster or machine changed under an unchanged app; SLOs still apply, and "
            "the release record names who asked). The only way: another served name, benchmark profile or set of "
            "levels starts no new anchor by itself",
        ),
    }
    return in_sections(params)
