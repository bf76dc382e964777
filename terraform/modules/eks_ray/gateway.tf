# A Gateway API controller and its GatewayClass: what KubeRay's incremental upgrade needs, and with it raylift's
# blue/green release on EKS (the new cluster started beside the serving one with 0 % of the traffic, judged, then
# switched: raylift.targets.eks_blue_green). KubeRay creates a Gateway and an HTTPRoute of this class for each held
# upgrade; users keep reaching Serve through serve_endpoint's load balancer. Off: blue_green_gateway = false, and
# a new rayClusterConfig is then released with `release: direct` (KubeRay's plain NewCluster upgrade).
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

resource "kubectl_manifest" "gateway_class" {
  count = var.blue_green_gateway ? 1 : 0
  yaml_body = yamlencode({
    apiVersion = "gateway.networking.k8s.io/v1"
    kind       = "GatewayClass"
    metadata   = { name = var.gateway_class_name }
    spec       = { controllerName = "gateway.envoyproxy.io/gatewayclass-controller" }
  })

  depends_on = [helm_release.envoy_gateway]
}
