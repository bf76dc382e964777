# Airflow's Kubernetes access: an access entry mapping its IAM role to one group, bound to a Role
# that manages RayServices (and reads their pods and services) in the raylift namespace only.
locals {
  airflow_group = "raylift-airflow"
}

resource "kubernetes_role_v1" "airflow" {
  count = var.grant_airflow_access ? 1 : 0
  metadata {
    name      = "raylift-airflow"
    namespace = kubernetes_namespace_v1.ray.metadata[0].name
  }

  rule {
    api_groups = ["ray.io"]
    resources  = ["rayservices", "rayclusters"]
    verbs      = ["get", "list", "watch", "create", "update", "patch", "delete"]
  }

  rule {
    api_groups = ["ray.io"]
    resources  = ["rayservices/status", "rayclusters/status"]
    verbs      = ["get"]
  }

  rule {
    api_groups = [""]
    resources  = ["pods", "services", "events"]
    verbs      = ["get", "list", "watch"]
  }
  # a blue/green release: KubeRay's Gateway read for its address, one HTTPRoute per measured arm
  # (raylift.targets.eks_blue_green.arm_url), deleted at promote or removal
  rule {
    api_groups = ["gateway.networking.k8s.io"]
    resources  = ["gateways"]
    verbs      = ["get"]
  }

  rule {
    api_groups = ["gateway.networking.k8s.io"]
    resources  = ["httproutes"]
    verbs      = ["get", "create", "patch", "delete"]
  }
}

resource "kubernetes_role_binding_v1" "airflow" {
  count = var.grant_airflow_access ? 1 : 0
  metadata {
    name      = "raylift-airflow"
    namespace = kubernetes_namespace_v1.ray.metadata[0].name
  }
  role_ref {
    api_group = "rbac.authorization.k8s.io"
    kind      = "Role"
    name      = kubernetes_role_v1.airflow[0].metadata[0].name
  }
  subject {
    kind      = "Group"
    name      = local.airflow_group
    api_group = "rbac.authorization.k8s.io"
  }
}

resource "aws_eks_access_entry" "airflow" {
  count             = var.airflow_role_arn == null ? 0 : 1
  cluster_name      = aws_eks_cluster.ray.name
  principal_arn     = var.airflow_role_arn
  kubernetes_groups = [local.airflow_group]
  type              = "STANDARD"
  tags              = var.tags
}
