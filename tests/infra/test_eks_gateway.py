"""The EKS stack's Gateway API controller, read from terraform's own parse: KubeRay (v1.7) grows a held candidate only
once its Gateway is Accepted and Programmed (rayservice_controller.go checkIfNeedTargetCapacityUpdate ->
utils.IsGatewayReady), Envoy Gateway sets Programmed only when its Envoy LoadBalancer Service has an address
(internal/gatewayapi/status/gateway.go UpdateGatewayStatusProgrammedCondition), and raylift measures both arms there:
so the GatewayClass's EnvoyProxy must ask the AWS Load Balancer Controller for an internal NLB, and the controller
must be allowed to make one (its webhook off: the Service names the class itself)."""

from __future__ import annotations

from pathlib import Path

from tests.infra.terraform_model import TerraformModule, unquote
from tests.infra.test_eks_serve_endpoint import blocks_of

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "terraform/modules/eks_ray"


def test_the_gateway_class_gives_each_gateway_an_internal_nlb_the_load_balancer_controller_makes() -> None:
    eks = TerraformModule.load(MODULE)
    manifests = blocks_of(eks, "resource", "kubectl_manifest")
    gateway_class, proxy = manifests["gateway_class"]["yaml_body"], manifests["gateway_proxy"]["yaml_body"]
    for fact in ('group = "gateway.envoyproxy.io"', 'kind = "EnvoyProxy"', 'name = "raylift-internal-nlb"',
                 'namespace = "envoy-gateway-system"'):  # Envoy Gateway: GatewayClass.spec.parametersRef
        assert fact in " ".join(gateway_class.split()), fact
    for fact in ('kind = "EnvoyProxy"', 'name = "raylift-internal-nlb"', 'type = "LoadBalancer"',
                 'loadBalancerClass = "service.k8s.aws/nlb"',
                 '"service.beta.kubernetes.io/aws-load-balancer-scheme" = "internal"',
                 '"service.beta.kubernetes.io/aws-load-balancer-nlb-target-type" = "ip"'):
        assert fact in " ".join(proxy.split()), fact
    chart = blocks_of(eks, "resource", "helm_release")["aws_load_balancer_controller"]
    assert "enableServiceMutatorWebhook = false" in chart["values"][0]  # the class is named, not defaulted


def test_the_load_balancer_controller_may_create_only_what_it_tags_and_only_with_the_gateway() -> None:
    eks = TerraformModule.load(MODULE)
    policy = blocks_of(eks, "data", "aws_iam_policy_document")["lb_controller_gateway_nlb"]
    actions = set()
    for statement in policy["statement"]:
        actions |= {unquote(a) for a in statement["actions"]}
        (condition,) = statement["condition"]
        assert unquote(condition["test"]) == "Null" and unquote(condition["values"][0]) == "false"
        assert unquote(condition["variable"]) in ("aws:RequestTag/elbv2.k8s.aws/cluster",
                                                  "aws:ResourceTag/elbv2.k8s.aws/cluster"), statement
    assert {"elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup",
            "elasticloadbalancing:CreateListener", "ec2:CreateSecurityGroup"} <= actions
    attached = blocks_of(eks, "resource", "aws_iam_role_policy")["lb_controller_gateway_nlb"]
    assert attached["count"] == "${var.blue_green_gateway ? 1 : 0}"


def test_airflow_may_read_the_gateway_and_manage_the_arm_routes() -> None:
    """raylift.targets.eks_blue_green.arm_url reads KubeRay's Gateway and applies (server-side) and deletes one
    HTTPRoute per arm."""
    text = " ".join((MODULE / "access.tf").read_text().split())
    assert 'api_groups = ["gateway.networking.k8s.io"] resources = ["gateways"] verbs = ["get"]' in text
    assert ('api_groups = ["gateway.networking.k8s.io"] resources = ["httproutes"] verbs = ["get", "create", '
            '"patch", "delete"]') in text
