# What raylift reads; tools/tf_outputs_to_airflow.py turns these into Airflow variables
# (raylift_<output>) and the aws_default connection (region only; credentials stay in the default chain).
output "raylift_target" {
  description = "The raylift target this stack serves."
  value       = "eks"
}

output "region" {
  description = "AWS region of the stack."
  value       = var.region
}

output "model_bucket" {
  description = "Model bucket name."
  value       = module.model_bucket.bucket_name
}

output "model_store_uri" {
  description = "s3:// prefix raylift stages models under."
  value       = "s3://${module.model_bucket.bucket_name}/models"
}

output "ecr_repository_url" {
  description = "ECR repository of the Ray + vLLM image."
  value       = module.image_pipeline.repository_url
}

output "codebuild_project" {
  description = "CodeBuild project that builds the image."
  value       = module.image_pipeline.codebuild_project_name
}

output "eks_cluster" {
  description = "EKS cluster name."
  value       = module.ray.cluster_name
}

output "eks_nodegroups" {
  description = "Managed node group names by key (gpu, graviton, inferentia, system: never resized by raylift)."
  value       = module.ray.nodegroup_names
}

output "eks_namespace" {
  description = "Namespace raylift applies its RayService to."
  value       = module.ray.ray_namespace
}

output "eks_service_account" {
  description = "Service account of the Ray pods (model bucket read through Pod Identity)."
  value       = module.ray.ray_service_account
}

output "airflow_role_arn" {
  description = "Role for the Airflow workers (null when only existing roles got the policy)."
  value       = module.airflow_iam.role_arn
}

output "dashboard_name" {
  description = "CloudWatch dashboard of the stack."
  value       = module.dashboard.dashboard_name
}

output "ray_auth_secret" {
  description = "Kubernetes Secret with the Ray auth token: pass it as the eks target option ray_auth_secret."
  value       = module.ray.ray_auth_secret
}

output "eks_serve_endpoint" {
  description = "Serve's endpoint on the internal load balancer: tools/tf_outputs_to_airflow.py makes it the eks target option endpoint."
  value       = module.ray.serve_endpoint
}

output "eks_staging_service_account" {
  description = "Service account of the model staging Jobs (EKS Pod Identity: writes the model bucket)."
  value       = module.ray.staging_service_account
}

output "staging_image" {
  description = "Image of the model staging Jobs (null: raylift stages on the Airflow worker)."
  value       = var.staging_image
}

output "eks_gateway_class" {
  description = "GatewayClass of the blue/green release's held upgrade: tools/tf_outputs_to_airflow.py makes it the eks target option gateway_class."
  value       = module.ray.gateway_class
}
