# The KubeRay operator: turns the RayService raylift applies into a Ray cluster plus Serve apps.
resource "helm_release" "kuberay_operator" {
  name             = "kuberay-operator"
  repository       = "https://ray-project.github.io/kuberay-helm/"
  chart            = "kuberay-operator"
  version          = var.kuberay_operator_version
  namespace        = "kuberay-system"
  create_namespace = true

  values = [yamlencode({
    nodeSelector = { "raylift.io/pool" = "system" }
  })]

  depends_on = [aws_eks_node_group.ray]
}
