# A Gateway API controller and its GatewayClass: what KubeRay's incremental upgrade needs, and with it raylift's
# blue/green release on EKS (the new cluster started beside the serving one with 0 % of the traffic, judged, then
# switched: raylift.targets.eks_blue_green). KubeRay creates a Gateway and an HTTPRoute of this class for each held
# upgrade; users keep reaching Serve through serve_endpoint's load balancer. Off: blue_green_gateway = false, and
# a new rayClusterConfig is then released with `release: direct` (KubeRay's plain NewCluster upgrade).
#
# The Gateway must get an address: KubeRay v1.7 grows the held candidate only once its Gateway is Accepted and
# Programmed (rayservice_controller.go checkIfNeedTargetCapacityUpdate -> utils.IsGatewayReady), and Envoy Gateway
# sets Programmed only when the Envoy LoadBalancer Service it creates per Gateway has a load balancer address
# (internal/gatewayapi/status/gateway.go UpdateGatewayStatusProgrammedCondition). raylift measures both arms of the
# release through that address too (HTTPRoutes /raylift-arm/<cluster>, raylift.targets.eks_blue_green.arm_url), so it
# must be reachable from the Airflow workers (MWAA, ECS) but not from the internet: an internal NLB.
#   - EnvoyProxy "raylift-internal-nlb" (Envoy Gateway's "Customize EnvoyProxy" task: the GatewayClass's
#     parametersRef; spec.provider.kubernetes.envoyService) gives the Service spec.loadBalancerClass
#     service.k8s.aws/nlb, which the AWS Load Balancer Controller reconciles without its Service mutator webhook
#     (its "Network Load Balancer" guide: the class offloads the Service from the in-tree controller; the webhook only
#     sets that class on Services that have none, so it stays off for everyone else's Services), with the
#     annotations of its Service annotations page: aws-load-balancer-scheme internal, nlb-target-type ip, the
#     stack's subnets, and source ranges limited to serve_client_cidrs (the VPC by default).
#   - the controller's role may create and manage only load balancers, target groups and security groups tagged
#     elbv2.k8s.aws/cluster (the conditions of the controller's reference IAM policy, docs/install/iam_policy.json),
#     and only while blue_green_gateway is on.
resource "helm_release" "envoy_gateway" {
  count            = var.blue_green_gateway ? 1 : 0
  name             = "envoy-gateway"
  repository       = "oci://docker.io/envoyproxy"
  chart            = "gateway-helm"
  version          = var.envoy_gateway_version
  namespace        = "envoy-gateway-system"
  create_namespace = true

  values = [yamlencode({
    deployment = { pod = { nodeSelector = { "raylift.io/pool" = "system" } } }
  })]

  depends_on = [aws_eks_node_group.ray]
}

resource "kubectl_manifest" "gateway_proxy" {
  count = var.blue_green_gateway ? 1 : 0
  yaml_body = yamlencode({
    apiVersion = "gateway.envoyproxy.io/v1alpha1"
    kind       = "EnvoyProxy"
    metadata   = { name = "raylift-internal-nlb", namespace = "envoy-gateway-system" }
    spec = {
      provider = {
        type = "Kubernetes"
        kubernetes = {
          envoyDeployment = { pod = { nodeSelector = { "raylift.io/pool" = "system" } } }
          envoyService = {
            type                  = "LoadBalancer"
            loadBalancerClass     = "service.k8s.aws/nlb"
            externalTrafficPolicy = "Cluster"
            annotations = {
              "service.beta.kubernetes.io/aws-load-balancer-scheme"          = "internal"
              "service.beta.kubernetes.io/aws-load-balancer-nlb-target-type" = "ip"
              "service.beta.kubernetes.io/aws-load-balancer-subnets"         = join(",", var.subnet_ids)
              "service.beta.kubernetes.io/load-balancer-source-ranges"       = join(",", local.serve_client_cidrs)
            }
          }
        }
      }
    }
  })

  depends_on = [helm_release.envoy_gateway]
}

resource "kubectl_manifest" "gateway_class" {
  count = var.blue_green_gateway ? 1 : 0
  yaml_body = yamlencode({
    apiVersion = "gateway.networking.k8s.io/v1"
    kind       = "GatewayClass"
    metadata   = { name = var.gateway_class_name }
    spec = {
      controllerName = "gateway.envoyproxy.io/gatewayclass-controller"
      parametersRef = {
        group     = "gateway.envoyproxy.io"
        kind      = "EnvoyProxy"
        name      = "raylift-internal-nlb"
        namespace = "envoy-gateway-system"
      }
    }
  })

  depends_on = [kubectl_manifest.gateway_proxy]
}

# What the load balancer controller needs to give the Envoy Service its internal NLB (the reference policy's
# statements for a Service of class service.k8s.aws/nlb), each write conditioned on the controller's own tag.
data "aws_iam_policy_document" "lb_controller_gateway_nlb" {
  #checkov:skip=CKV_AWS_111:Create calls cannot name an ARN before the resource exists; each is conditioned on the controller's cluster tag.
  #checkov:skip=CKV_AWS_356:Same: tag conditions, not resource ARNs, scope what the controller creates.
  statement {
    sid       = "CreateTaggedForTheGateway"
    actions   = ["elasticloadbalancing:CreateLoadBalancer", "elasticloadbalancing:CreateTargetGroup", "ec2:CreateSecurityGroup"]
    resources = ["*"]
    condition {
      test     = "Null"
      variable = "aws:RequestTag/elbv2.k8s.aws/cluster"
      values   = ["false"]
    }
  }

  statement {
    sid     = "TagOnCreate"
    actions = ["elasticloadbalancing:AddTags", "ec2:CreateTags"]
    resources = [
      "arn:${local.partition}:elasticloadbalancing:${local.region}:${local.account_id}:loadbalancer/net/*/*",
      "arn:${local.partition}:elasticloadbalancing:${local.region}:${local.account_id}:targetgroup/*/*",
      "arn:${local.partition}:ec2:${local.region}:${local.account_id}:security-group/*",
    ]
    condition {
      test     = "Null"
      variable = "aws:RequestTag/elbv2.k8s.aws/cluster"
      values   = ["false"]
    }
  }

  statement {
    sid = "ManageItsOwn"
    actions = [
      "elasticloadbalancing:CreateListener",
      "elasticloadbalancing:DeleteListener",
      "elasticloadbalancing:ModifyListener",
      "elasticloadbalancing:ModifyLoadBalancerAttributes",
      "elasticloadbalancing:SetSecurityGroups",
      "elasticloadbalancing:SetSubnets",
      "elasticloadbalancing:DeleteLoadBalancer",
      "elasticloadbalancing:ModifyTargetGroup",
      "elasticloadbalancing:ModifyTargetGroupAttributes",
      "elasticloadbalancing:DeleteTargetGroup",
      "elasticloadbalancing:RegisterTargets",
      "elasticloadbalancing:DeregisterTargets",
      "ec2:AuthorizeSecurityGroupIngress",
      "ec2:RevokeSecurityGroupIngress",
      "ec2:DeleteSecurityGroup",
    ]
    resources = ["*"]
    condition {
      test     = "Null"
      variable = "aws:ResourceTag/elbv2.k8s.aws/cluster"
      values   = ["false"]
    }
  }
}

resource "aws_iam_role_policy" "lb_controller_gateway_nlb" {
  count  = var.blue_green_gateway ? 1 : 0
  name   = "gateway-internal-nlb"
  role   = aws_iam_role.lb_controller.id
  policy = data.aws_iam_policy_document.lb_controller_gateway_nlb.json
}
