"""Serve config fit checks: each refusal names its numbers; the seed configs fit the seed clusters.

Clusters are the seeds' own: ECS example 2/3 ran on 3 x g5.12xlarge (4 A10G each, `ray status`:
12 GPUs); Inf2 ran on inf2.48xlarge (24 NeuronCores). The configs are the real ones in
serve_apps/configs/ as the deploy step renders them.

``fit`` is raylift's own arithmetic (``check_fit``: no Ray). ``ray_fit`` is the deploy's whole fit check
(``raylift.release.start.fit_check``) on the local target, whose Ray schema check runs
``raylift/serve/ray_schema_check.py`` with the runtime env's Python: the real Ray judges (skipped without that env).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest

from raylift.config import LocalSettings
from raylift.errors import ServeFitError
from raylift.records import ClusterState
from raylift.serve.config import app_kind, apply_autoscaling, load_config, render_app
from raylift.serve.validation import Cluster, FitReport, check_fit
from raylift.targets.local import LocalTarget

CONFIGS = Path(__file__).resolve().parents[1] / "serve_apps/configs"
RUNTIME = Path(__file__).resolve().parents[1] / ".cache/venvs/runtime/bin/python"
needs_runtime = pytest.mark.skipif(
    not RUNTIME.exists(),
    reason=f"Ray's schema check runs in the runtime env ({RUNTIME}), which is not built: bash tools/setup.sh runtime",
)
G5_12X = {"CPU": 48.0, "GPU": 4.0, "accelerator_type:A10G": 1.0}
SEED_GPU_CLUSTER = Cluster(
    totals={"CPU": 144.0, "GPU": 12.0, "accelerator_type:A10G": 3.0}, nodes=(G5_12X,) * 3
)
INF2_48X = Cluster(totals={"CPU": 192.0, "neuron_cores": 24.0}, nodes=({"CPU": 192.0, "neuron_cores": 24.0},))
LOCAL = Cluster(totals={"CPU": 3.0}, nodes=({"CPU": 2.0}, {"CPU": 1.0}))


def app(
    config: str, *, replicas: int | None = None, engine_args: dict | None = None, **render: object
) -> dict:
    base = load_config(CONFIGS / config)
    args = dict(base["applications"][0].get("args", {}))
    if engine_args is not None:
        args["engine_args"] = {**args.get("engine_args", {}), **engine_args}
    return render_app(
        base, app_name="app", working_dir="file:///a.zip", args=args, replicas=replicas, **render
    )


def fit(a: dict, cluster: Cluster, **kw: object) -> FitReport:
    return check_fit(a, cluster, vllm=app_kind(a).vllm, **kw)


class RuntimeRayTarget(LocalTarget):
    """The local target (its Ray: the runtime env's) on a cluster that reports ``cluster``."""

    def __init__(self, cluster: Cluster, home: Path) -> None:
        super().__init__(settings=LocalSettings(home=home, runtime_python=RUNTIME))
        self.fixed = cluster

    def cluster_state(self) -> ClusterState:
        return ClusterState(nodes=len(self.fixed.nodes), resources=dict(self.fixed.totals),
                            node_resources=list(self.fixed.nodes))


def ray_fit(a: dict, cluster: Cluster, *, others: list[dict] | tuple = ()) -> FitReport:
    """The deploy's fit check: Ray's schema check by the runtime env's Ray, then raylift's rules and the fit."""
    import tempfile

    from raylift.release.start import fit_check

    with tempfile.TemporaryDirectory() as home:
        return fit_check(RuntimeRayTarget(cluster, Path(home)), a, {"applications": list(others)})


@pytest.mark.parametrize(
    ("config", "cluster"),
    [
        ("llm-gpu-tp4.yaml", SEED_GPU_CLUSTER),
        ("llm-gpu-pp3-tp4.yaml", SEED_GPU_CLUSTER),
        ("llm-gpu.yaml", SEED_GPU_CLUSTER),
        ("translator-gpu.yaml", SEED_GPU_CLUSTER),
        ("llm-neuron.yaml", INF2_48X),
        ("llm-cpu.yaml", LOCAL),
        ("translator-cpu.yaml", LOCAL),
        ("llamacpp-cpu.yaml", LOCAL),
    ],
)
def test_seed_configs_fit_seed_clusters(config: str, cluster: Cluster) -> None:
    report = fit(app(config), cluster)
    assert report.lines  # it did compare needs with the cluster


def test_translator_seed_28_replicas_at_half_a_gpu_do_not_fit_12_gpus() -> None:
    with pytest.raises(
        ServeFitError, match=r"GPU: needs 14 = 28 x 0\.5 \(Translator\); cluster has 12"
    ) as err:
        fit(app("translator-gpu.yaml", replicas=28), SEED_GPU_CLUSTER)
    assert "Nothing was deployed" in str(err.value)


def test_tp_times_pp_above_the_clusters_gpus_is_refused() -> None:
    two_nodes = Cluster(totals={"GPU": 8.0, "CPU": 96.0}, nodes=(G5_12X, G5_12X))
    with pytest.raises(ServeFitError) as err:
        fit(app("llm-gpu-pp3-tp4.yaml"), two_nodes)
    message = str(err.value)
    assert "GPU: needs 12 = 1 x 12 (LLMServer); cluster has 8" in message
    assert "pipeline_parallel_size 3 x 1 replica(s) needs 3 node slot(s) of 4 GPU(s) each" in message


def test_tp_larger_than_a_node_is_refused_even_when_the_total_fits() -> None:
    a = app("llm-gpu-pp3-tp4.yaml", engine_args={"tensor_parallel_size": 12, "pipeline_parallel_size": 1})
    a["deployments"][0]["placement_group_strategy"] = "PACK"
    with pytest.raises(
        ServeFitError, match=r"tensor_parallel_size 12 must fit within one node.*largest node has 4 GPU"
    ):
        fit(a, SEED_GPU_CLUSTER)


def test_parallel_sizes_must_match_the_gpu_bundles() -> None:
    a = app("llm-gpu-tp4.yaml", engine_args={"tensor_parallel_size": 2})
    with pytest.raises(
        ServeFitError,
        match=r"tensor_parallel_size 2 x pipeline_parallel_size 1 = 2 GPU worker\(s\), but each LLMServer replica asks for 4",
    ):
        fit(a, SEED_GPU_CLUSTER)


def test_strict_pack_must_fit_one_node() -> None:
    small = Cluster(totals={"GPU": 4.0, "CPU": 16.0}, nodes=({"GPU": 2.0, "CPU": 8.0},) * 2)
    with pytest.raises(ServeFitError, match=r"must fit on one node.*hold 0"):
        fit(app("llm-gpu-tp4.yaml", engine_args={"tensor_parallel_size": 4}), small)


def test_pipeline_parallel_with_strict_pack_is_refused() -> None:
    a = app("llm-gpu-pp3-tp4.yaml")
    a["deployments"][0]["placement_group_strategy"] = "STRICT_PACK"
    with pytest.raises(ServeFitError, match="STRICT_PACK puts every stage on one node: use PACK"):
        fit(a, SEED_GPU_CLUSTER)


def test_gpu_config_on_a_cpu_cluster_is_refused_with_a_hint() -> None:
    with pytest.raises(ServeFitError, match=r"GPU: needs 4 .* cluster has 0.*this cluster has none"):
        fit(app("llm-gpu-tp4.yaml"), LOCAL)


def test_neuron_cores_must_equal_tensor_parallel_size() -> None:
    a = app("llm-neuron.yaml", engine_args={"tensor_parallel_size": 4})
    with pytest.raises(
        ServeFitError,
        match="tensor_parallel_size 4 needs 4 NeuronCores per replica, but LLMServer asks for neuron_cores 8",
    ):
        fit(a, INF2_48X)


def test_neuron_replicas_beyond_the_cores_are_refused() -> None:
    with pytest.raises(ServeFitError, match=r"neuron_cores: needs 32 = 4 x 8 \(LLMServer\); cluster has 24"):
        fit(app("llm-neuron.yaml", replicas=4), INF2_48X)


def test_other_apps_hold_their_resources() -> None:
    other = app("translator-gpu.yaml", replicas=20, route_prefix="/translate")  # 10 GPUs
    other["name"] = "translator"
    with pytest.raises(
        ServeFitError, match=r"GPU: needs 4 .* cluster has 12, other apps hold 10, so 2 are free"
    ):
        fit(app("llm-gpu-tp4.yaml"), SEED_GPU_CLUSTER, others=[other])


def test_redeploying_the_same_app_does_not_count_its_old_version() -> None:
    running = app("llm-gpu-tp4.yaml")
    assert fit(app("llm-gpu-tp4.yaml"), Cluster(totals={"GPU": 4.0}, nodes=(G5_12X,)), others=[running]).lines


def test_cpu_replicas_are_checked_per_node_on_the_local_cluster() -> None:
    with pytest.raises(
        ServeFitError,
        match=r"4 replica\(s\) of 1 CPU each must fit on a node, but the 2 node\(s\) \(2 CPU; 1 CPU\) hold 3",
    ):
        fit(app("llm-cpu.yaml", replicas=4), LOCAL)


def test_without_a_node_list_unreported_resources_are_not_refused() -> None:
    """A node-group view (EKS) names only its accelerator: what it does not report is unknown, not 0."""
    eks_inf2 = Cluster(totals={"neuron_cores": 8.0})  # the EKS target converts devices to Ray's cores
    assert fit(app("llm-neuron.yaml"), eks_inf2).lines == [
        "neuron_cores: needs 8 = 1 x 8 (LLMServer); cluster has 8, other apps hold 0"]
    assert fit(app("llm-neuron.yaml"), Cluster(totals={"GPU": 4.0})).lines == []  # no Neuron reported: unknown
    with pytest.raises(ServeFitError, match="neuron_cores: needs 8"):
        fit(app("llm-neuron.yaml"), Cluster(totals={"neuron_cores": 4.0}))  # 2 devices: half a TP=8 replica
    with pytest.raises(ServeFitError, match="GPU: needs 4"):
        fit(app("llm-gpu-tp4.yaml"), Cluster(totals={"GPU": 0.0}))


def test_without_a_node_list_only_totals_are_checked() -> None:
    totals_only = Cluster(totals={"GPU": 12.0})
    assert fit(app("llm-gpu-pp3-tp4.yaml"), totals_only).lines  # per-node layout unknown: not refused
    with pytest.raises(ServeFitError, match="GPU: needs 16"):
        fit(app("llm-gpu-tp4.yaml", replicas=4), totals_only)


def test_autoscaling_floor_must_fit_and_ceiling_only_warns() -> None:
    seed = {
        "target_ongoing_requests": 2,
        "max_ongoing_requests": 5,
        "min_replicas": 0,
        "max_replicas": 5,
        "downscale_delay_s": 600,
    }
    scaled = apply_autoscaling(app("llm-gpu-tp4.yaml"), seed)
    report = fit(scaled, SEED_GPU_CLUSTER)
    assert any("max_replicas 5 would need 20 GPU" in w for w in report.warnings)
    with pytest.raises(ServeFitError, match=r"GPU: needs 16 = 4 x 4"):
        fit(apply_autoscaling(scaled, {"min_replicas": 4}), SEED_GPU_CLUSTER)


def no_count(d: dict) -> None:
    d.pop("num_replicas")


@pytest.mark.parametrize(
    ("mutate", "message", "check"),
    [
        pytest.param(
            lambda d: d.update(num_replicas=-1),
            "deployments[LLMServer].num_replicas: Input should be greater than 0 or Input should be a valid string "
            "(got -1) (Ray's ServeApplicationSchema)",
            ray_fit, marks=needs_runtime,
        ),
        pytest.param(
            lambda d: (no_count(d), d.update(autoscaling_config={"min_replicas": 3, "max_replicas": 2})),
            "deployments[LLMServer].autoscaling_config: max_replicas (2) must be greater than or equal to "
            "min_replicas (3) (Ray's AutoscalingConfig)",
            ray_fit, marks=needs_runtime,
        ),
        pytest.param(
            lambda d: d.update(autoscaling_config={"min_replicas": 1, "max_replicas": 2}),
            "deployments[LLMServer]: Manually setting num_replicas is not allowed when autoscaling_config is "
            "provided (Ray's ServeApplicationSchema)",
            ray_fit, marks=needs_runtime,
        ),
        pytest.param(
            lambda d: d.update(placement_group_strategy="TIGHT"),
            "deployments[LLMServer].placement_group_bundles/placement_group_strategy: Invalid placement group "
            "strategy TIGHT",
            ray_fit, marks=needs_runtime,
        ),
        (
            lambda d: d["ray_actor_options"].update(num_gpus=1.5),
            "num_gpus 1.5: Ray shares a GPU only in fractions",
            fit,
        ),
        pytest.param(
            lambda d: d["ray_actor_options"].update(num_cpus=2),
            "`num_cpus` for the actor is 2.0, but the bundle only has 1.0 `CPU` specified (Ray Serve's ReplicaConfig)",
            ray_fit, marks=needs_runtime,
        ),
        pytest.param(
            lambda d: d.update(placement_group_bundles=[]),
            "deployments[LLMServer].placement_group_bundles/placement_group_strategy: Bundles must be a non-empty list "
            "of resource dictionaries",
            ray_fit, marks=needs_runtime,
        ),
        pytest.param(
            lambda d: d["placement_group_bundles"][1].update(GPU="one"),
            "deployments[LLMServer].placement_group_bundles[1].GPU: Input should be a valid number, unable to parse "
            "string as a number (got 'one') (Ray's ServeApplicationSchema)",
            ray_fit, marks=needs_runtime,
        ),
        pytest.param(
            lambda d: (no_count(d), d.update(autoscaling_config={"max_replicas": 0})),
            "deployments[LLMServer].autoscaling_config.max_replicas: Input should be greater than 0 (got 0) "
            "(Ray's AutoscalingConfig)",
            ray_fit, marks=needs_runtime,
        ),
    ],
)
def test_schema_problems_are_refused_by_rays_models(mutate, message: str, check) -> None:  # noqa: ANN001 - small mutators
    """Ray's models decide what is valid (by the Ray that will run the config: ``ray_fit``); the refusal names the
    field path and Ray's reason. raylift's own rules (``fit``) refuse in the same words, without Ray."""
    a = app("llm-gpu-tp4.yaml")
    mutate(a["deployments"][0])
    with pytest.raises(ServeFitError, match="is not a valid config") as err:
        check(a, SEED_GPU_CLUSTER)
    assert message in str(err.value)
    assert "Nothing was deployed" in str(err.value)


def test_replica_counts_follow_ray_not_raylifts_old_rules() -> None:
    """``num_replicas: auto`` alone is Serve's default autoscaling (min 1, max 100): raylift's own rules refused
    it. (``num_replicas: 0``: the next test.)"""
    auto = app("llm-gpu-tp4.yaml")
    auto["deployments"][0]["num_replicas"] = "auto"
    report = fit(auto, SEED_GPU_CLUSTER)
    assert "GPU: needs 4 = 1 x 4 (LLMServer); cluster has 12, other apps hold 0" in report.lines
    assert any("max_replicas 100 would need 400 GPU" in w for w in report.warnings)
    auto["deployments"][0]["autoscaling_config"] = {"min_replicas": 2}  # "auto" + overrides: still max 100
    report = fit(auto, SEED_GPU_CLUSTER)
    assert "GPU: needs 8 = 2 x 4 (LLMServer); cluster has 12, other apps hold 0" in report.lines
    assert any("max_replicas 100" in w for w in report.warnings)


@needs_runtime
def test_zero_replicas_are_refused_by_ray() -> None:
    """``num_replicas: 0`` is refused by Ray (a PositiveInt): raylift's own rules allowed it."""
    zero = app("llm-gpu-tp4.yaml", replicas=0)
    with pytest.raises(ServeFitError, match=r"num_replicas: Input should be greater than 0 .*\(got 0\)"):
        ray_fit(zero, SEED_GPU_CLUSTER)


@needs_runtime
def test_fields_ray_does_not_define_are_warned_about_not_refused() -> None:
    """Ray's Serve schema ignores fields it does not know (forward compatibility); raylift follows it and warns."""
    a = app("llm-gpu-tp4.yaml")
    a["deployments"][0]["num_replica"] = 3
    a["deployments"][0]["ray_actor_options"]["num_cpu"] = 2
    report = ray_fit(a, SEED_GPU_CLUSTER)
    assert report.lines
    assert report.warnings == [
        "deployments[LLMServer].num_replica is not a field of Ray's Serve schema: Serve ignores it (a typo?)",
        "deployments[LLMServer].ray_actor_options.num_cpu is not a field of Ray's Serve schema: Serve ignores it (a typo?)",
    ]


@needs_runtime
def test_the_whole_config_is_checked_by_rays_serve_deploy_schema() -> None:
    """Beside the running apps: Ray's ServeDeploySchema refuses what its PUT would (host/port per app here)."""
    other = app("translator-gpu.yaml", route_prefix="/translate")
    other["name"] = "translator"
    a = app("llm-gpu-tp4.yaml")
    a["port"] = 8001
    with pytest.raises(
        ServeFitError, match=r"cannot join the running Serve config: \(the whole config\): Port 8001 is set in the config for "
        r"application `app`.*\(Ray's ServeDeploySchema\)"
    ):
        ray_fit(a, SEED_GPU_CLUSTER, others=[other])


def test_ray_serve_schema_is_not_imported_with_the_module() -> None:
    """The DAG processor imports the operators: neither Ray nor pydantic loads with the fit check (Ray's models run
    in the cluster's Python, ``ray_schema_check.py``; tests/test_no_ray_on_control.py checks that none is imported)."""
    code = "import sys, raylift.serve.validation; sys.exit('ray' in sys.modules or 'pydantic' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "plugins")}
    assert subprocess.run([sys.executable, "-c", code], env=env, check=False).returncode == 0


def test_max_ongoing_below_the_autoscaling_target_is_refused() -> None:
    a = apply_autoscaling(app("llm-gpu.yaml"), {"target_ongoing_requests": 8, "max_ongoing_requests": 5})
    with pytest.raises(ServeFitError, match="max_ongoing_requests 5 < target_ongoing_requests 8"):
        fit(a, SEED_GPU_CLUSTER)


def test_every_problem_is_reported_at_once() -> None:
    a = copy.deepcopy(app("llm-gpu-pp3-tp4.yaml"))
    a["args"]["engine_args"]["tensor_parallel_size"] = 8  # 8 x 3 = 24 != 12 bundles, and TP 8 > 4 per node
    with pytest.raises(ServeFitError) as err:
        fit(a, SEED_GPU_CLUSTER)
    assert "= 24 GPU worker(s)" in str(err.value) and "largest node has 4 GPU" in str(err.value)
