"""RayService rendering: every profile validates against the real KubeRay CRD; broken ones fail by path."""

from __future__ import annotations

import copy
import pickle

import pytest
import yaml

from raylift.errors import ManifestValidationError, RayliftValueError
from raylift.kuberay import manifest as m
from raylift.kuberay.profiles import GPU_RESOURCE, NEURON_RESOURCE, NEURONCORE_RESOURCE, PROFILES
from tests.fixtures.kuberay_crd import CrdNotFoundError, crds_dir, validate
from tests.kuberay.serve_configs import serve_config


def render(profile: str = "gpu-vllm", **kwargs):
    args = dict(
        name="llm", namespace="raylift", serve_config=serve_config(), image="123.dkr.ecr/raylift:abc",
        profile=profile, workers=2, hf_home="/mnt/models", model_volume_claim="raylift-models",
        hf_token_secret="hf-token",
    )  # fmt: skip
    args.update(kwargs)
    return m.render_rayservice(**args)


def test_crd_is_read_from_shared_reference_not_the_project() -> None:
    assert (crds_dir() / "ray.io_rayservices.yaml").is_file()
    assert not list(m.config.repo_root().glob("plugins/**/ray.io_*.yaml"))


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("strategy", m.UPGRADE_STRATEGIES)
def test_every_profile_and_strategy_validates_against_the_crd(profile: str, strategy: str) -> None:
    gateway = {"gateway_class": "aws-alb"} if strategy == "NewClusterWithIncrementalUpgrade" else {}
    manifest = render(profile, upgrade_strategy=strategy, **gateway)
    validate(manifest)
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayService"
    assert manifest["spec"]["upgradeStrategy"]["type"] == strategy
    assert manifest["spec"]["rayClusterConfig"]["rayVersion"] == m.config.RAY_VERSION


def test_serve_config_v2_is_the_local_serve_config_minus_kuberay_owned_http_keys() -> None:
    local = serve_config()
    spec = render(serve_config=local)["spec"]
    deployed = yaml.safe_load(spec["serveConfigV2"])
    assert deployed["applications"] == local["applications"]
    assert deployed["http_options"] == {"request_timeout_s": 120}
    assert deployed["proxy_location"] == "EveryNode"
    assert local["http_options"]["port"] == 8000  # the caller's dict is not mutated


def test_gpu_profile_requests_gpus_on_g5_g6_with_toleration() -> None:
    cluster = render("gpu-vllm", workers=3)["spec"]["rayClusterConfig"]
    (group,) = cluster["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (3, 3, 8)
    pod = group["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"][GPU_RESOURCE] == "1"
    types = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    values = types["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert {t.split(".")[0] for t in values} == {"g5", "g6"}
    assert pod["tolerations"] == [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64", "raylift.io/nodegroup": "gpu"}
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"


def test_graviton_profile_runs_workers_on_its_node_group_and_the_head_on_karpenter_without_accelerators() -> None:
    cluster = render("graviton")["spec"]["rayClusterConfig"]
    head, worker = cluster["headGroupSpec"], cluster["workerGroupSpecs"][0]
    assert head["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64", "karpenter.sh/nodepool": "ray-head"}
    assert worker["template"]["spec"]["nodeSelector"] == {
        "kubernetes.io/arch": "arm64", "model-inferencing": "cpu-arm", "raylift.io/nodegroup": "graviton"}
    for pod in (head["template"]["spec"], worker["template"]["spec"]):
        limits = pod["containers"][0]["resources"]["limits"]
        assert GPU_RESOURCE not in limits and NEURON_RESOURCE not in limits
    assert PROFILES["graviton"].engine == "llama.cpp"


def test_inf2_profile_asks_for_neuroncores_tp8_and_the_neuron_scheduler() -> None:
    """NeuronCores, not whole devices: KubeRay v1.7 maps only a container's aws.amazon.com/neuroncore to Ray's
    neuron_cores (common/pod.go), what the Serve config's TP=8 replica asks Ray for (issue 55 item 9)."""
    pod = render("inf2")["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits[NEURONCORE_RESOURCE] == "8" and NEURON_RESOURCE not in limits  # 8 cores = 4 devices
    assert pod["schedulerName"] == "my-scheduler"
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "inf2.48xlarge", "raylift.io/nodegroup": "inferentia"}
    assert PROFILES["inf2"].tensor_parallel_size == 8


def test_hf_home_mount_and_token_only_as_secret_ref() -> None:
    manifest = render(env={"VLLM_USE_V1": "1"})
    for container in _containers(manifest):
        env = {e["name"]: e for e in container["env"]}
        assert env["HF_HOME"]["value"] == "/mnt/models"
        assert env["VLLM_USE_V1"]["value"] == "1"
        assert env["HF_TOKEN"] == {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
        }
        assert container["volumeMounts"] == [{"name": "models", "mountPath": "/mnt/models", "readOnly": True}]


@pytest.mark.parametrize(
    "key", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY"]
)
def test_secret_looking_env_is_refused(key: str) -> None:
    with pytest.raises(m.SecretInManifestError, match=key):
        render(env={key: "hf_abc"})
    cfg = serve_config()
    cfg["applications"][0]["runtime_env"]["env_vars"][key] = "hf_abc"
    with pytest.raises(m.SecretInManifestError, match="runtime_env"):
        render(serve_config=cfg)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "LLM_bad"}, "DNS-1035"),
        ({"name": "x" * 48}, "at most 47"),
        ({"workers": -1}, "workers"),
        ({"upgrade_strategy": "BlueGreen"}, "upgrade_strategy"),
        ({"profile": "tpu"}, "gpu-vllm"),
        ({"hf_home": None}, "hf_home"),
    ],
)
def test_bad_render_arguments_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(RayliftValueError, match=match):
        render(**kwargs)


def test_local_working_dir_is_refused() -> None:
    cfg = serve_config()
    cfg["applications"][0]["runtime_env"]["working_dir"] = "/work/main/var/artifacts/abc.zip"
    with pytest.raises(m.InvalidRayServiceError, match="local working_dir"):
        render(serve_config=cfg)


@pytest.mark.parametrize(
    ("breakage", "path"),
    [
        (lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0].__setitem__("replicas", "two"),
         "$.spec.rayClusterConfig.workerGroupSpecs[0].replicas"),
        (lambda s: s["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
         ["limits"].__setitem__("cpu", "two cores"),
         "$.spec.rayClusterConfig.headGroupSpec.template.spec.containers[0].resources.limits.cpu"),
        (lambda s: s["rayClusterConfig"].__setitem__("workerGroupSpec", []),  # typo: unknown field
         "$.spec.rayClusterConfig"),
        (lambda s: s.pop("rayClusterConfig"), "$.spec"),
        (lambda s: s["rayClusterConfig"]["workerGroupSpecs"][0]["rayStartParams"].__setitem__("num-gpus", 1),
         "$.spec.rayClusterConfig.workerGroupSpecs[0].rayStartParams.num-gpus"),
    ],
)  # fmt: skip
def test_broken_manifest_is_refused_naming_the_path(breakage, path: str) -> None:
    manifest = copy.deepcopy(render())
    breakage(manifest["spec"])
    with pytest.raises(ManifestValidationError) as info:
        validate(manifest)
    assert info.value.path == path
    assert path in str(info.value)
    clone = pickle.loads(pickle.dumps(info.value))
    assert (clone.path, str(clone)) == (info.value.path, str(info.value))


def test_int_or_string_quantities_accept_both_forms() -> None:
    manifest = render()
    head = manifest["spec"]["rayClusterConfig"]["headGroupSpec"]
    limits = head["template"]["spec"]["containers"][0]["resources"]["limits"]
    limits["cpu"] = 2
    limits["memory"] = "8Gi"
    validate(manifest)


def test_missing_crd_dir_says_which_variable_to_set(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("RAYLIFT_KUBERAY_CRDS", str(tmp_path))
    with pytest.raises(CrdNotFoundError, match="RAYLIFT_KUBERAY_CRDS"):
        validate(render())


def test_to_apply_config_drops_status_and_server_fields() -> None:
    stored = render()
    server_fields = {"uid": "u", "resourceVersion": "7", "generation": 3, "managedFields": [{"manager": "x"}]}
    stored["metadata"].update(server_fields)
    stored["status"] = {"serviceStatus": "Running"}
    again = m.to_apply_config(stored)
    assert again == render()


@pytest.mark.parametrize(
    ("strategy", "gpus", "cpus"),
    [
        ("NewCluster", 8.0, 2 * (2 + 4 * 3)),  # head 2 cpu + 4 workers x 3 cpu, twice
        ("NewClusterWithIncrementalUpgrade", 6.0, 2 + 4 * 3 + 2 + 2 * 3),  # + head + 50% surge
        ("None", 4.0, 2 + 4 * 3),
    ],
)
def test_capacity_needed_doubles_for_blue_green(strategy: str, gpus: float, cpus: float) -> None:
    need = m.capacity_needed("gpu-vllm", 4, strategy)
    assert need[GPU_RESOURCE] == gpus
    assert need["cpu"] == cpus


def test_capacity_needed_for_inf2_counts_neuroncores_and_memory_in_gib() -> None:
    need = m.capacity_needed("inf2", 3, "NewCluster")
    assert need[NEURONCORE_RESOURCE] == 2 * 3 * 8 and NEURON_RESOURCE not in need
    assert need["memory"] == 2 * (8 + 3 * 240)
    assert GPU_RESOURCE not in need


def _containers(manifest):
    cluster = manifest["spec"]["rayClusterConfig"]
    yield from cluster["headGroupSpec"]["template"]["spec"]["containers"]
    for group in cluster["workerGroupSpecs"]:
        yield from group["template"]["spec"]["containers"]


def test_service_account_reaches_every_pod_and_validates() -> None:
    manifest = render(service_account="ray")  # render_rayservice validates nothing itself: check the CRD too
    validate(manifest)
    cluster = manifest["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    assert {p["serviceAccountName"] for p in pods} == {"ray"}
    assert "serviceAccountName" not in render()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]


def test_ray_token_auth_names_the_secret_and_validates() -> None:
    manifest = render(ray_auth_secret="ray-auth-token")
    validate(manifest)
    assert manifest["spec"]["rayClusterConfig"]["authOptions"] == {"mode": "token", "secretName": "ray-auth-token"}
    assert "ray-auth-token" not in str(list(_containers(manifest)))  # KubeRay injects the env; no token here
    assert "authOptions" not in render()["spec"]["rayClusterConfig"]


def test_the_eks_target_passes_its_ray_auth_secret_to_the_manifest() -> None:
    from raylift.targets import get_target

    target = get_target("eks", cluster_name="ray", worker_nodegroup="gpu", bucket="b", image="img",
                        ray_auth_secret="ray-auth-token")
    config = {"applications": [{"name": "llm", "import_path": "llm.app:build_app", "route_prefix": "/"}]}
    cluster = target.render(config, 1)["spec"]["rayClusterConfig"]
    assert cluster["authOptions"] == {"mode": "token", "secretName": "ray-auth-token"}
