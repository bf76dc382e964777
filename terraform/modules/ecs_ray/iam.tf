# Three roles: the instances (join ECS, GPU metrics), the task execution (pull image, write logs)
# and the Ray task itself (read models from the bucket, ECS Exec).
data "aws_region" "current" {}

data "aws_partition" "current" {}

locals {
  managed_policy = "arn:${data.aws_partition.current.partition}:iam::aws:policy"
}

data "aws_iam_policy_document" "ec2_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ec2.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "instances" {
  name_prefix        = "${var.name}-instance-"
  assume_role_policy = data.aws_iam_policy_document.ec2_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "instances" {
  for_each = toset([
    "service-role/AmazonEC2ContainerServiceforEC2Role",
    "AmazonSSMManagedInstanceCore",
    "CloudWatchAgentServerPolicy",
  ])
  role       = aws_iam_role.instances.name
  policy_arn = "${local.managed_policy}/${each.value}"
}

resource "aws_iam_instance_profile" "instances" {
  name_prefix = "${var.name}-instance-"
  role        = aws_iam_role.instances.name
  tags        = var.tags
}

data "aws_iam_policy_document" "tasks_assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["ecs-tasks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "execution" {
  name_prefix        = "${var.name}-exec-"
  assume_role_policy = data.aws_iam_policy_document.tasks_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "execution" {
  role       = aws_iam_role.execution.name
  policy_arn = "${local.managed_policy}/service-role/AmazonECSTaskExecutionRolePolicy"
}

resource "aws_iam_role" "task" {
  name_prefix        = "${var.name}-task-"
  assume_role_policy = data.aws_iam_policy_document.tasks_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "task" {
  #checkov:skip=CKV_AWS_111:The ssmmessages channel actions of ECS Exec have no resource-level permissions.
  #checkov:skip=CKV_AWS_356:The ssmmessages channel actions of ECS Exec have no resource-level permissions.
  statement {
    sid       = "ListModels"
    actions   = ["s3:ListBucket"]
    resources = [var.model_bucket_arn]
  }

  statement {
    sid       = "ReadModels"
    actions   = ["s3:GetObject"]
    resources = ["${var.model_bucket_arn}/*"]
  }

  # the staged warm-up (serve_apps/llm/warmup_cache.py): a key's first replica publishes the engine's compile cache
  # beside the staged models (<store>/warmup-cache/<key>/: a tarball, then metadata.json written If-None-Match),
  # and a replica that lost that race deletes its own tarball
  statement {
    sid       = "WriteWarmupCache"
    actions   = ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = ["${var.model_bucket_arn}/*warmup-cache/*"]
  }

  statement {
    sid       = "DecryptModels"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.model_bucket_kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${data.aws_region.current.region}.amazonaws.com"]
    }
  }

  statement {
    sid = "EcsExec"
    actions = [
      "ssmmessages:CreateControlChannel",
      "ssmmessages:CreateDataChannel",
      "ssmmessages:OpenControlChannel",
      "ssmmessages:OpenDataChannel",
    ]
    resources = ["*"]
  }
}

resource "aws_iam_role_policy" "task" {
  name   = "read-models"
  role   = aws_iam_role.task.id
  policy = data.aws_iam_policy_document.task.json
}
