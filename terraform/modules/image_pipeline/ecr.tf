# Where CodeBuild pushes the Ray + vLLM image: one tag per content digest, plus a moving tag
# (default "latest") that the ECS task definitions follow, so a new build needs no new task definition.
resource "aws_ecr_repository" "image" {
  #checkov:skip=CKV_AWS_51:The moving tag is re-pointed by each build on purpose (ECS tasks follow it); digest tags are content-addressed and never rewritten.
  name                 = var.name
  image_tag_mutability = "MUTABLE"
  force_delete         = false

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = aws_kms_key.build.arn
  }

  tags = var.tags
}

resource "aws_ecr_lifecycle_policy" "keep_recent" {
  repository = aws_ecr_repository.image.name
  policy = jsonencode({
    rules = [{
      rulePriority = 1
      description  = "Keep the last ${var.images_to_keep} images"
      selection = {
        tagStatus   = "any"
        countType   = "imageCountMoreThan"
        countNumber = var.images_to_keep
      }
      action = { type = "expire" }
    }]
  })
}
