# Serve's address for an Airflow outside the cluster (MWAA, an ECS-hosted Airflow): an internal Network Load
# Balancer that terraform owns (its DNS name is known at apply: output serve_endpoint), bound by the AWS Load
# Balancer Controller's TargetGroupBinding to KubeRay's own serve Service (<rayservice>-serve-svc). KubeRay points
# that Service at the active Ray cluster and switches it after an upgrade; the controller registers whatever pods
# the Service selects (ip targets), so the address stays put across upgrades and rollbacks.
#
# Why not a LoadBalancer Service or an Ingress of our own: a Service terraform creates cannot follow KubeRay's
# active-cluster selector (the RayCluster name changes on every upgrade), and one KubeRay creates (spec.serveService)
# gets its load balancer only after the first deploy, so terraform could not output its address.
# Internal only: no public subnet, no public scheme.
locals {
  serve_port         = 8000
  serve_service      = "${var.ray_service_name}-serve-svc"
  serve_client_cidrs = length(var.serve_client_cidrs) > 0 ? var.serve_client_cidrs : [data.aws_vpc.ray.cidr_block]
  lb_controller_sa   = "aws-load-balancer-controller"
}

data "aws_vpc" "ray" {
  id = var.vpc_id
}

resource "aws_security_group" "serve_lb" {
  name_prefix = "${var.name}-serve-lb-"
  description = "Internal NLB in front of Ray Serve: Serve's port from the clients' CIDRs only"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "serve_lb_from_clients" {
  for_each          = toset(local.serve_client_cidrs)
  security_group_id = aws_security_group.serve_lb.id
  description       = "Ray Serve (OpenAI API) from ${each.value}"
  cidr_ipv4         = each.value
  from_port         = local.serve_port
  to_port           = local.serve_port
  ip_protocol       = "tcp"
  tags              = var.tags
}

resource "aws_vpc_security_group_egress_rule" "serve_lb_to_pods" {
  security_group_id = aws_security_group.serve_lb.id
  description       = "To the Serve pods (ip targets) and their health checks"
  cidr_ipv4         = data.aws_vpc.ray.cidr_block
  from_port         = local.serve_port
  to_port           = local.serve_port
  ip_protocol       = "tcp"
  tags              = var.tags
}

resource "aws_lb" "serve" {
  #checkov:skip=CKV_AWS_91:NLB access logs record TLS listeners only; this one is TCP, and Serve's requests are in the Ray logs.
  #checkov:skip=CKV_AWS_150:The example stack is torn down with terraform destroy after raylift_teardown; deletion protection would block that.
  name                             = substr("${var.name}-serve", 0, 32)
  internal                         = true
  load_balancer_type               = "network"
  subnets                          = var.subnet_ids
  security_groups                  = [aws_security_group.serve_lb.id]
  enable_cross_zone_load_balancing = true
  tags                             = var.tags
}

resource "aws_lb_target_group" "serve" {
  name_prefix          = "serve-"
  port                 = local.serve_port
  protocol             = "TCP"
  target_type          = "ip"
  vpc_id               = var.vpc_id
  deregistration_delay = 30

  health_check {
    protocol            = "HTTP"
    port                = "traffic-port"
    path                = "/-/healthz" # Ray Serve's proxy health route
    matcher             = "200"
    interval            = 10
    healthy_threshold   = 2
    unhealthy_threshold = 2
  }

  tags = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_lb_listener" "serve" {
  load_balancer_arn = aws_lb.serve.arn
  port              = local.serve_port
  protocol          = "TCP"

  default_action {
    type             = "forward"
    target_group_arn = aws_lb_target_group.serve.arn
  }

  tags = var.tags
}

# -- the AWS Load Balancer Controller: only its TargetGroupBinding reconciler is used -------------------------

resource "aws_iam_role" "lb_controller" {
  name_prefix        = "${var.name}-lb-controller-"
  assume_role_policy = data.aws_iam_policy_document.pod_identity_assume.json
  tags               = var.tags
}

# What a TargetGroupBinding needs, not the controller's full policy: this stack creates no load balancer through
# Kubernetes (no IngressClass, no Service webhook), so the controller only registers pods in this target group and
# opens Serve's port on the cluster security group to the load balancer's group.
data "aws_iam_policy_document" "lb_controller" {
  #checkov:skip=CKV_AWS_356:Describe calls of ELBv2 and EC2 have no resource-level permissions; narrowed to this region.
  #checkov:skip=CKV_AWS_111:Only read calls take "*" (no resource-level permissions); writes name the target group and the security group.
  statement {
    sid = "Describe"
    actions = [
      "ec2:DescribeAvailabilityZones",
      "ec2:DescribeInstances",
      "ec2:DescribeNetworkInterfaces",
      "ec2:DescribeSecurityGroups",
      "ec2:DescribeSubnets",
      "ec2:DescribeVpcs",
      "elasticloadbalancing:DescribeListeners",
      "elasticloadbalancing:DescribeLoadBalancers",
      "elasticloadbalancing:DescribeTags",
      "elasticloadbalancing:DescribeTargetGroupAttributes",
      "elasticloadbalancing:DescribeTargetGroups",
      "elasticloadbalancing:DescribeTargetHealth",
    ]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = [local.region]
    }
  }

  statement {
    sid       = "RegisterServePods"
    actions   = ["elasticloadbalancing:RegisterTargets", "elasticloadbalancing:DeregisterTargets"]
    resources = [aws_lb_target_group.serve.arn]
  }

  statement {
    sid     = "OpenServeToTheLoadBalancer"
    actions = ["ec2:AuthorizeSecurityGroupIngress", "ec2:RevokeSecurityGroupIngress"]
    resources = [
      "arn:${local.partition}:ec2:${local.region}:${local.account_id}:security-group/${aws_eks_cluster.ray.vpc_config[0].cluster_security_group_id}",
    ]
  }
}

resource "aws_iam_role_policy" "lb_controller" {
  name   = "target-group-binding"
  role   = aws_iam_role.lb_controller.id
  policy = data.aws_iam_policy_document.lb_controller.json
}

resource "aws_eks_pod_identity_association" "lb_controller" {
  cluster_name    = aws_eks_cluster.ray.name
  namespace       = "kube-system"
  service_account = local.lb_controller_sa
  role_arn        = aws_iam_role.lb_controller.arn
  tags            = var.tags
}

resource "helm_release" "aws_load_balancer_controller" {
  name       = "aws-load-balancer-controller"
  repository = "https://aws.github.io/eks-charts"
  chart      = "aws-load-balancer-controller"
  version    = var.aws_load_balancer_controller_version
  namespace  = "kube-system"

  values = [yamlencode({
    clusterName                 = aws_eks_cluster.ray.name
    region                      = local.region
    vpcId                       = var.vpc_id # Pod Identity: no instance metadata lookups
    serviceAccount              = { create = true, name = local.lb_controller_sa }
    createIngressClassResource  = false # no ALB Ingress: this stack makes no load balancer from Kubernetes
    enableServiceMutatorWebhook = false # leave other LoadBalancer Services to whoever owns them
    nodeSelector                = { "raylift.io/pool" = "system" }
  })]

  depends_on = [aws_eks_pod_identity_association.lb_controller, aws_eks_node_group.ray]
}

# KubeRay's serve Service may not exist yet (raylift creates the RayService on its first deploy): the controller
# retries the binding until it does, and registers the active cluster's serve pods from then on.
resource "kubectl_manifest" "serve_binding" {
  yaml_body = yamlencode({
    apiVersion = "elbv2.k8s.aws/v1beta1"
    kind       = "TargetGroupBinding"
    metadata   = { name = "${var.ray_service_name}-serve", namespace = kubernetes_namespace_v1.ray.metadata[0].name }
    spec = {
      serviceRef     = { name = local.serve_service, port = local.serve_port }
      targetGroupARN = aws_lb_target_group.serve.arn
      targetType     = "ip"
      networking = {
        ingress = [{
          from  = [{ securityGroup = { groupID = aws_security_group.serve_lb.id } }]
          ports = [{ protocol = "TCP", port = local.serve_port }]
        }]
      }
    }
  })
  depends_on = [helm_release.aws_load_balancer_controller]
}
