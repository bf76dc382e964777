# What raylift reads; tools/tf_outputs_to_airflow.py turns these into Airflow variables
# (raylift_<output>) and the aws_default connection (region only; credentials stay in the default chain).
output "raylift_target" {
  description = "The raylift target this stack serves."
  value       = "ecs"
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

output "image_tag" {
  description = "Moving tag the ECS tasks run; builds re-point it."
  value       = var.image_tag
}

output "codebuild_project" {
  description = "CodeBuild project that builds the image."
  value       = module.image_pipeline.codebuild_project_name
}

output "ecs_cluster" {
  description = "ECS cluster name."
  value       = module.ray.cluster_name
}

output "ecs_head_service" {
  description = "ECS service of the Ray head."
  value       = module.ray.head_service_name
}

output "ecs_worker_service" {
  description = "ECS service of the Ray GPU workers."
  value       = module.ray.worker_service_name
}

output "cloudmap_namespace" {
  description = "Cloud Map namespace of the head."
  value       = module.ray.cloudmap_namespace_name
}

output "cloudmap_service" {
  description = "Cloud Map service of the head."
  value       = module.ray.cloudmap_service_name
}

output "cloudmap_endpoint_service" {
  description = "Cloud Map service of the blue/green user endpoint (serve.<namespace>): empty until a blue/green switch registers the serving head there."
  value       = module.ray.endpoint_cloud_map_service
}

output "gpus_per_node" {
  description = "GPUs per Ray node."
  value       = module.ray.gpus_per_node
}

output "airflow_role_arn" {
  description = "Role for the Airflow workers (null when only existing roles got the policy)."
  value       = module.airflow_iam.role_arn
}

output "dashboard_name" {
  description = "CloudWatch dashboard of the stack."
  value       = module.dashboard.dashboard_name
}

output "ray_auth_token_secret_arn" {
  description = "Secrets Manager secret with the Ray cluster's auth token: the Airflow workers and triggerer need it as RAY_AUTH_TOKEN."
  value       = module.ray.ray_auth_token_secret_arn
}

output "ecs_staging_task_definition" {
  description = "Family of the model staging task (null without staging_image: raylift then stages on the Airflow worker)."
  value       = module.ray.staging_task_definition
}
