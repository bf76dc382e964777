"""The EKS stack's Serve endpoint for an Airflow outside the cluster, read from terraform's own parse (python-hcl2; no
terraform binary here; checkov runs over it in test_terraform.py): an internal NLB, bound by the AWS Load Balancer
Controller to the Service KubeRay keeps on the active Ray cluster, output as the eks target's ``endpoint``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raylift.kuberay.manifest import _SERVE_PORT
from raylift.targets.eks import EksOptions
from tests.infra.terraform_model import TerraformModule, unquote

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "terraform/modules/eks_ray"
EXAMPLE = ROOT / "terraform/examples/eks"


def blocks_of(module: TerraformModule, kind: str, rtype: str) -> dict[str, dict[str, Any]]:
    """``{name: body}`` of the module's ``kind`` (resource, data, output) blocks of type ``rtype``."""
    found: dict[str, dict[str, Any]] = {}
    for doc in module.docs.values():
        for entry in doc.get(kind, []):
            for label, named in entry.items():
                if unquote(label) == rtype:
                    found.update({unquote(name): body for name, body in named.items()})
    return found


def local(module: TerraformModule, name: str) -> Any:
    return next(entry[name] for doc in module.docs.values() for entry in doc.get("locals", []) if name in entry)


def test_serve_sits_behind_an_internal_network_load_balancer() -> None:
    eks = TerraformModule.load(MODULE)
    assert {"aws_lb.serve", "aws_lb_target_group.serve", "aws_lb_listener.serve", "kubectl_manifest.serve_binding",
            "helm_release.aws_load_balancer_controller", "aws_eks_pod_identity_association.lb_controller"} <= eks.resources
    balancers = blocks_of(eks, "resource", "aws_lb")
    assert set(balancers) == {"serve"}
    assert balancers["serve"]["internal"] is True, "Serve must not get a public address"
    assert unquote(balancers["serve"]["load_balancer_type"]) == "network"
    assert "internet-facing" not in "".join(tf.read_text() for tf in MODULE.glob("*.tf"))
    group = blocks_of(eks, "resource", "aws_lb_target_group")["serve"]
    assert unquote(group["target_type"]) == "ip"  # pod IPs: the binding follows KubeRay's Service, not nodes
    assert local(eks, "serve_port") == _SERVE_PORT  # the port raylift's RayService heads open for Serve
    assert unquote(group["health_check"][0]["path"]) == "/-/healthz"
    clients = blocks_of(eks, "resource", "aws_vpc_security_group_ingress_rule")["serve_lb_from_clients"]
    assert "cidr_ipv4" in clients and "0.0.0.0/0" not in str(clients)


def test_the_binding_names_the_service_kuberay_keeps_on_the_active_cluster() -> None:
    """The load balancer serves ``<rayservice>-serve-svc``, the Service whose selector KubeRay moves to the new Ray
    cluster after an upgrade; its default name is the one the eks target deploys (and defaults its endpoint to)."""
    eks = TerraformModule.load(MODULE)
    assert unquote(local(eks, "serve_service")) == "${var.ray_service_name}-serve-svc"
    default_name = unquote(eks.variables["ray_service_name"]["default"])
    assert default_name == EksOptions.model_fields["rayservice_name"].default
    body = blocks_of(eks, "resource", "kubectl_manifest")["serve_binding"]["yaml_body"]
    for fact in ('kind = "TargetGroupBinding"', "serviceRef = {name = local.serve_service, port = local.serve_port}",
                 "targetGroupARN = aws_lb_target_group.serve.arn", 'targetType = "ip"',
                 "securityGroup = {groupID = aws_security_group.serve_lb.id}"):
        assert fact in body, fact
    assert blocks_of(eks, "resource", "kubectl_manifest")["serve_binding"]["depends_on"] == [
        "${helm_release.aws_load_balancer_controller}"
    ]


def test_the_load_balancer_controller_runs_with_pod_identity_and_writes_only_to_its_own_resources() -> None:
    eks = TerraformModule.load(MODULE)
    chart = blocks_of(eks, "resource", "helm_release")["aws_load_balancer_controller"]
    assert (unquote(chart["repository"]), unquote(chart["chart"])) == (
        "https://aws.github.io/eks-charts", "aws-load-balancer-controller")
    association = blocks_of(eks, "resource", "aws_eks_pod_identity_association")["lb_controller"]
    assert association["service_account"] == "${local.lb_controller_sa}"
    assert "serviceAccount = {create = true, name = local.lb_controller_sa}" in chart["values"][0]
    assert "createIngressClassResource = false" in chart["values"][0]  # nothing else can make a public ALB
    statements = blocks_of(eks, "data", "aws_iam_policy_document")["lb_controller"]["statement"]
    for statement in statements:
        actions = [unquote(a) for a in statement["actions"]]
        if statement["resources"] == ['"*"']:
            assert all(a.split(":", 1)[1].startswith("Describe") for a in actions), actions
            assert unquote(statement["condition"][0]["variable"]) == "aws:RequestedRegion"
        else:  # writes name one resource: Serve's target group, or the cluster's own security group
            (resource,) = statement["resources"]
            assert resource == "${aws_lb_target_group.serve.arn}" or (
                "security-group/${aws_eks_cluster.ray.vpc_config[0].cluster_security_group_id}" in resource
            ), statement


def outputs_of(module: TerraformModule) -> dict[str, dict[str, Any]]:
    return {unquote(name): body for doc in module.docs.values() for entry in doc.get("output", [])
            for name, body in entry.items()}


def test_the_endpoint_is_an_output_of_the_module_and_the_example() -> None:
    """The module outputs the load balancer's URL; the example root passes it on as eks_serve_endpoint, which
    tools/tf_outputs_to_airflow.py turns into the eks target's ``endpoint`` (tests/targets/test_eks_endpoint.py)."""
    eks, example = TerraformModule.load(MODULE), TerraformModule.load(EXAMPLE)
    assert unquote(outputs_of(eks)["serve_endpoint"]["value"]) == "http://${aws_lb.serve.dns_name}:${local.serve_port}"
    assert outputs_of(example)["eks_serve_endpoint"]["value"] == "${module.ray.serve_endpoint}"
