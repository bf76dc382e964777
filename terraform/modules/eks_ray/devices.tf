# Device plugins, so pods can request nvidia.com/gpu and aws.amazon.com/neuron(core) resources.
resource "helm_release" "nvidia_device_plugin" {
  name       = "nvidia-device-plugin"
  repository = "https://nvidia.github.io/k8s-device-plugin"
  chart      = "nvidia-device-plugin"
  version    = var.nvidia_device_plugin_version
  namespace  = "kube-system"

  values = [yamlencode({
    nodeSelector = { "raylift.io/accelerator" = "nvidia" }
    tolerations  = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
  })]

  depends_on = [aws_eks_node_group.ray]
}

# Neuron device plugin (exposes neuroncores/devices on Inf2) and the Neuron scheduler extension,
# which keeps multi-core allocations (tensor parallel 8) on contiguous cores.
resource "helm_release" "neuron" {
  name       = "neuron"
  repository = "oci://public.ecr.aws/neuron"
  chart      = "neuron-helm-chart"
  version    = var.neuron_chart_version
  namespace  = "kube-system"

  values = [yamlencode({
    devicePlugin = {
      enabled      = true
      nodeSelector = { "raylift.io/accelerator" = "neuron" }
      tolerations  = [{ key = "aws.amazon.com/neuron", operator = "Exists", effect = "NoSchedule" }]
    }
    scheduler = { enabled = true }
    npd       = { enabled = false }
  })]

  depends_on = [aws_eks_node_group.ray]
}
