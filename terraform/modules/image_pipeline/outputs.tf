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

output "codebuild_arm64_project_name" {
  description = "CodeBuild project for arm64 images (raylift starts <codebuild_project>-arm64 for them)."
  value       = aws_codebuild_project.image_arm64.name
}

output "codebuild_arm64_project_arn" {
  description = "ARN of the arm64 CodeBuild project."
  value       = aws_codebuild_project.image_arm64.arn
}

output "source_prefix" {
  description = "Key prefix in the source bucket under which raylift uploads build-context zips."
  value       = var.source_prefix
}
