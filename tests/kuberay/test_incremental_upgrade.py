"""``NewClusterWithIncrementalUpgrade``: KubeRay splits traffic through a Gateway it builds from a GatewayClass the
cluster must have, so raylift names that class (target option ``gateway_class``) and never invents one; the
upgrade options are checked against KubeRay's own CRD (read from ../shared/reference/kuberay), and the EKS target
sizes for a surge, not for two clusters."""

from __future__ import annotations

import pytest

from raylift.errors import RayliftValueError
from raylift.kuberay import manifest as m
from raylift.targets import get_target
from raylift.targets.eks import EksTarget
from tests.fixtures.kuberay_crd import crd_schema, validate
from tests.kuberay.serve_configs import serve_config

INCREMENTAL = "NewClusterWithIncrementalUpgrade"


def render(**kwargs: object) -> dict:
    args: dict = dict(name="llm", namespace="raylift", serve_config=serve_config(), image="123.dkr.ecr/raylift:abc",
                      profile="gpu-vllm", workers=4, upgrade_strategy=INCREMENTAL)  # fmt: skip
    return m.render_rayservice(**(args | kwargs))


def upgrade_options_schema() -> dict:
    spec = crd_schema()["properties"]["spec"]["properties"]
    return spec["upgradeStrategy"]["properties"]["clusterUpgradeOptions"]


def test_the_gateway_class_reaches_the_upgrade_options_and_validates_against_the_crd() -> None:
    manifest = render(gateway_class="aws-alb")
    validate(manifest)
    options = manifest["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]
    assert options["gatewayClassName"] == "aws-alb"
    schema = upgrade_options_schema()
    assert set(schema["required"]) <= set(options)  # gatewayClassName, intervalSeconds, stepSizePercent
    assert set(options) <= set(schema["properties"])


def test_without_a_gateway_class_the_strategy_is_refused_not_given_a_made_up_class() -> None:
    with pytest.raises(m.InvalidRayServiceError, match="needs gateway_class: the Gateway API GatewayClass"):
        render()
    with pytest.raises(RayliftValueError, match="target option upgrade_strategy 'NewClusterWithIncrementalUpgrade' "
                                                "needs gateway_class"):
        get_target("eks", cluster_name="ray", worker_nodegroup="gpu", bucket="b", upgrade_strategy=INCREMENTAL)


def test_the_eks_target_renders_its_gateway_class() -> None:
    target = get_target("eks", cluster_name="ray", worker_nodegroup="gpu", bucket="b", upgrade_strategy=INCREMENTAL,
                        gateway_class="aws-alb", image="123.dkr.ecr/raylift:abc", accelerators_per_node=1)
    assert isinstance(target, EksTarget)
    manifest = target.render(serve_config(), workers=4)
    validate(manifest)
    assert manifest["spec"]["upgradeStrategy"]["clusterUpgradeOptions"]["gatewayClassName"] == "aws-alb"


def test_the_eks_headroom_for_an_incremental_upgrade_is_a_surge_not_a_second_cluster() -> None:
    target = get_target("eks", cluster_name="ray", worker_nodegroup="gpu", bucket="b", upgrade_strategy=INCREMENTAL,
                        gateway_class="aws-alb", accelerators_per_node=1)
    assert isinstance(target, EksTarget)
    running, _ = target.nodes_for(4, "None")
    blue_green, _ = target.nodes_for(4, "NewCluster")
    incremental, _ = target.nodes_for(4, INCREMENTAL)
    surge = -(-4 * m.INCREMENTAL_UPGRADE_OPTIONS["maxSurgePercent"] // 100)
    assert (running, blue_green, incremental) == (4, 8, 4 + surge)
