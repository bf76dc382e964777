# Builds the image with docker inside CodeBuild (privileged mode), from a build context zip that
# raylift uploads to the model bucket under source_prefix, named by its content digest; each build names
# its zip (sourceLocationOverride) and IMAGE_TAG (the same digest). Two projects, one per architecture:
# x86_64, and arm64 (ARM_CONTAINER) for the Graviton llama.cpp image, which raylift starts on "<name>-arm64".
resource "aws_cloudwatch_log_group" "build" {
  name              = "/aws/codebuild/${var.name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = aws_kms_key.build.arn
  tags              = var.tags
}

resource "aws_codebuild_project" "image" {
  #checkov:skip=CKV_AWS_316:docker build needs the Docker daemon, which CodeBuild only runs in privileged mode; the project builds only raylift's own context.
  name           = var.name
  description    = "Builds the raylift Ray + vLLM image and pushes it to ${aws_ecr_repository.image.repository_url}"
  service_role   = aws_iam_role.codebuild.arn
  build_timeout  = var.build_timeout_minutes
  encryption_key = aws_kms_key.build.arn

  source {
    type      = "S3"
    location  = "${var.source_bucket_name}/${var.source_prefix}/latest.zip"
    buildspec = var.buildspec
  }

  artifacts {
    type = "NO_ARTIFACTS"
  }

  environment {
    compute_type    = var.compute_type
    image           = var.build_image
    type            = "LINUX_CONTAINER"
    privileged_mode = true # docker build needs the Docker daemon inside the build container

    environment_variable {
      name  = "IMAGE_REPO_URI"
      value = aws_ecr_repository.image.repository_url
    }
    environment_variable {
      name  = "IMAGE_TAG"
      value = "latest"
    }
    environment_variable {
      name  = "DOCKERFILE"
      value = var.dockerfile
    }
    environment_variable {
      name  = "BUILD_CONTEXT"
      value = var.build_context
    }
  }

  logs_config {
    cloudwatch_logs {
      group_name = aws_cloudwatch_log_group.build.name
      status     = "ENABLED"
    }
  }

  tags = var.tags
}

resource "aws_codebuild_project" "image_arm64" {
  #checkov:skip=CKV_AWS_316:docker build needs the Docker daemon, which CodeBuild only runs in privileged mode; the project builds only raylift's own context.
  name           = "${var.name}-arm64"
  description    = "Builds raylift's arm64 (Graviton) images natively and pushes them to ${aws_ecr_repository.image.repository_url}"
  service_role   = aws_iam_role.codebuild.arn
  build_timeout  = var.build_timeout_minutes
  encryption_key = aws_kms_key.build.arn

  source {
    type      = "S3"
    location  = "${var.source_bucket_name}/${var.source_prefix}/latest.zip"
    buildspec = var.buildspec
  }

  artifacts {
    type = "NO_ARTIFACTS"
  }

  environment {
    compute_type    = var.arm64_compute_type
    image           = var.arm64_build_image
    type            = "ARM_CONTAINER"
    privileged_mode = true # docker build needs the Docker daemon inside the build container

    environment_variable {
      name  = "IMAGE_REPO_URI"
      value = aws_ecr_repository.image.repository_url
    }
    environment_variable {
      name  = "IMAGE_TAG"
      value = "latest"
    }
    environment_variable {
      name  = "DOCKERFILE"
      value = "images/ray-llamacpp-arm64/Dockerfile"
    }
    environment_variable {
      name  = "BUILD_CONTEXT"
      value = var.build_context
    }
  }

  logs_config {
    cloudwatch_logs {
      group_name = aws_cloudwatch_log_group.build.name
      status     = "ENABLED"
    }
  }

  tags = var.tags
}
