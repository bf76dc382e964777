output "repository_url" {
  description = "ECR repository URL (IMAGE_REPO_URI of the build)."
  value       = aws_ecr_repository.image.repository_url
}

output "repository_arn" {
  description = "ECR repository ARN (the Airflow policy grants ecr:DescribeImages on it)."
  value       = aws_ecr_repository.image.arn
}

output "repository_kms_key_arn" {
  description = "Key that encrypts the repository and build logs (ECR grants itself use of it for pulls)."
  value       = aws_kms_key.build.arn
}

output "codebuild_project_name" {
  description = "CodeBuild project raylift starts (codebuild:StartBuild)."
  value       = aws_codebuild_project.image.name
}

output "codebuild_project_arn" {
  description = "CodeBuild project ARN."
  value       = aws_codebuild_project.image.arn
}
