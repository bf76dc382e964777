output "cluster_name" {
  description = "EKS cluster name."
  value       = aws_eks_cluster.ray.name
}

output "cluster_arn" {
  description = "EKS cluster ARN."
  value       = aws_eks_cluster.ray.arn
}

output "cluster_endpoint" {
  description = "Kubernetes API endpoint (providers and raylift's kubeconfig)."
  value       = aws_eks_cluster.ray.endpoint
}

output "cluster_certificate_authority" {
  description = "Base64 CA certificate of the API server (public, not a secret)."
  value       = aws_eks_cluster.ray.certificate_authority[0].data
}

output "nodegroup_names" {
  description = "Managed node group names by key (gpu, graviton, inferentia, system: never resized by raylift)."
  value       = { for key, group in aws_eks_node_group.ray : key => group.node_group_name }
}

output "nodegroup_arns" {
  description = "Managed node group ARNs (the Airflow policy may resize these)."
  value       = [for group in aws_eks_node_group.ray : group.arn]
}

output "ray_namespace" {
  description = "Namespace of the RayService."
  value       = kubernetes_namespace_v1.ray.metadata[0].name
}

output "ray_service_account" {
  description = "Service account of the Ray pods (Pod Identity: model bucket read)."
  value       = kubernetes_service_account_v1.ray.metadata[0].name
}

output "ray_auth_secret" {
  description = "Kubernetes Secret with the Ray auth token (eks target option ray_auth_secret)."
  value       = kubernetes_secret_v1.ray_auth.metadata[0].name
}

output "serve_endpoint" {
  description = "Serve's OpenAI endpoint on the internal load balancer (eks target option endpoint): reachable from the VPC, unlike cluster DNS."
  value       = "http://${aws_lb.serve.dns_name}:${local.serve_port}"
}

output "gateway_class" {
  description = "GatewayClass for KubeRay's held upgrade (raylift's eks target option gateway_class); null without blue_green_gateway."
  value       = var.blue_green_gateway ? var.gateway_class_name : null
}
