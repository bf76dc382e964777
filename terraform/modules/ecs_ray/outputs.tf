output "cluster_name" {
  description = "ECS cluster of the Ray services."
  value       = aws_ecs_cluster.ray.name
}

output "cluster_arn" {
  description = "ECS cluster ARN."
  value       = aws_ecs_cluster.ray.arn
}

output "head_service_name" {
  description = "ECS service running the Ray head."
  value       = aws_ecs_service.head.name
}

output "worker_service_name" {
  description = "ECS service running the Ray GPU workers (raylift sets its desired count)."
  value       = aws_ecs_service.worker.name
}

output "service_arns" {
  description = "ARNs of the head and worker services."
  value       = [aws_ecs_service.head.id, aws_ecs_service.worker.id]
}

output "cloudmap_namespace_name" {
  description = "Cloud Map private DNS namespace of the head."
  value       = aws_service_discovery_private_dns_namespace.ray.name
}

output "cloudmap_service_name" {
  description = "Cloud Map service the head task registers in."
  value       = aws_service_discovery_service.head.name
}

output "endpoint_cloud_map_service" {
  description = "Cloud Map service of the user endpoint (raylift's target option endpoint_cloud_map_service): one instance, the serving head."
  value       = aws_service_discovery_service.endpoint.name
}

output "cloudmap_service_arns" {
  description = "Cloud Map services raylift registers in: the endpoint's (its one instance) and the green head's (a green head service's registry)."
  value       = concat([aws_service_discovery_service.endpoint.arn], aws_service_discovery_service.head_green[*].arn)
}

output "blue_green_service_arns" {
  description = "The -green head and worker services a blue/green release creates and deletes (ARNs; none without blue_green_surge)."
  value       = var.blue_green_surge ? [for svc in [aws_ecs_service.head, aws_ecs_service.worker] : "${svc.id}-green"] : []
}

output "head_address" {
  description = "DNS name of the Ray head inside the VPC."
  value       = local.head_address
}

output "gpus_per_node" {
  description = "GPUs per Ray node (raylift expects nodes x this many GPUs)."
  value       = var.gpus_per_node
}

output "log_group_name" {
  description = "CloudWatch log group of the Ray tasks."
  value       = aws_cloudwatch_log_group.ray.name
}

output "ray_auth_token_secret_arn" {
  description = "Secrets Manager secret holding the Ray cluster's auth token (give it to Airflow as RAY_AUTH_TOKEN)."
  value       = aws_secretsmanager_secret.ray_auth.arn
}

output "task_definition_family_arns" {
  description = "Every revision of the head and worker task-definition families (ARN patterns): raylift registers a revision per new image."
  value       = [for td in aws_ecs_task_definition.ray : "${td.arn_without_revision}:*"]
}

output "task_role_arns" {
  description = "The task and task-execution roles the task definitions name: registering a revision passes them (iam:PassRole)."
  value       = [aws_iam_role.task.arn, aws_iam_role.execution.arn]
}
