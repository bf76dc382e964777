output "policy_arn" {
  description = "ARN of the Airflow worker policy."
  value       = aws_iam_policy.airflow.arn
}

output "role_arn" {
  description = "ARN of the created Airflow worker role (null when create_role is false)."
  value       = var.create_role ? aws_iam_role.airflow[0].arn : null
}

output "role_name" {
  description = "Name of the created Airflow worker role (null when create_role is false)."
  value       = var.create_role ? aws_iam_role.airflow[0].name : null
}
