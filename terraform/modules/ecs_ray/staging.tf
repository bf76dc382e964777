# Model staging off the Airflow worker: a Fargate task definition that raylift runs once per staging
# (ecs:RunTask, the command overridden with `python -m raylift.aws.staging_job --source ... --bucket ...`), so
# the model passes through the task's ephemeral storage (up to 200 GiB) instead of the Airflow worker's disk.
# Its own task role may write the model bucket; the Ray tasks' role stays read-only. The task runs in the Ray
# services' subnets and security group (raylift reads them from the head service). Without staging_image no
# task definition is created and the target option `staging` must be `in_worker`.
variable "staging_image" {
  description = "Image with raylift (images/airflow, pushed to ECR) that the staging task runs; null: no staging task definition."
  type        = string
  default     = null
}

variable "staging_cpu" {
  description = "CPU units of the staging task (Fargate: 4096 = 4 vCPU, for hashing and parallel multipart uploads)."
  type        = number
  default     = 4096
}

variable "staging_memory_mib" {
  description = "Memory of the staging task in MiB (a Fargate size valid for staging_cpu)."
  type        = number
  default     = 16384
}

variable "staging_ephemeral_storage_gib" {
  description = "Fargate ephemeral storage of the staging task, where the model is downloaded before upload (21-200 GiB)."
  type        = number
  default     = 200
  validation {
    condition     = var.staging_ephemeral_storage_gib >= 21 && var.staging_ephemeral_storage_gib <= 200
    error_message = "Fargate ephemeral storage is 21 to 200 GiB."
  }
}

variable "staging_source_bucket_arns" {
  description = "Other buckets the staging task may read models from (model_source s3://...); the model bucket is always readable."
  type        = list(string)
  default     = []
}

variable "staging_hf_token_secret_arn" {
  description = "Secrets Manager secret with a Hugging Face token, given to the staging task as HF_TOKEN (gated models); null: none."
  type        = string
  default     = null
}

locals {
  staging_enabled = var.staging_image != null
  staging_family  = "${var.name}-model-staging"
}

resource "aws_cloudwatch_log_group" "staging" {
  #checkov:skip=CKV_AWS_158:Staging logs hold file names and progress, no secrets; CloudWatch encrypts them at rest by default.
  count             = local.staging_enabled ? 1 : 0
  name              = "/ecs/${var.name}-staging"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

resource "aws_iam_role" "staging" {
  count              = local.staging_enabled ? 1 : 0
  name_prefix        = "${var.name}-staging-"
  assume_role_policy = data.aws_iam_policy_document.tasks_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "staging" {
  statement {
    sid       = "ListModelBucket"
    actions   = ["s3:ListBucket"]
    resources = concat([var.model_bucket_arn], var.staging_source_bucket_arns)
  }

  statement {
    sid       = "ReadModels"
    actions   = ["s3:GetObject"]
    resources = [for arn in concat([var.model_bucket_arn], var.staging_source_bucket_arns) : "${arn}/*"]
  }

  statement {
    sid       = "WriteStagedModels"
    actions   = ["s3:PutObject", "s3:AbortMultipartUpload"]
    resources = ["${var.model_bucket_arn}/*"]
  }

  statement {
    sid       = "EncryptModelObjects"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.model_bucket_kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${data.aws_region.current.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "staging" {
  count  = local.staging_enabled ? 1 : 0
  name   = "stage-models"
  role   = aws_iam_role.staging[0].id
  policy = data.aws_iam_policy_document.staging.json
}

data "aws_iam_policy_document" "staging_hf_token" {
  count = local.staging_enabled && var.staging_hf_token_secret_arn != null ? 1 : 0
  statement {
    sid       = "ReadHubToken"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [var.staging_hf_token_secret_arn]
  }
}

resource "aws_iam_role_policy" "staging_hf_token" {
  count  = length(data.aws_iam_policy_document.staging_hf_token)
  name   = "read-hub-token"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.staging_hf_token[0].json
}

resource "aws_ecs_task_definition" "staging" {
  count                    = local.staging_enabled ? 1 : 0
  family                   = local.staging_family
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.staging_cpu
  memory                   = var.staging_memory_mib
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.staging[0].arn

  ephemeral_storage {
    size_in_gib = var.staging_ephemeral_storage_gib
  }

  volume {
    name = "scratch" # on the task's ephemeral storage: the download cache, gone with the task
  }

  container_definitions = jsonencode([{
    name      = "stage"
    image     = var.staging_image
    essential = true
    # The image's own entrypoint starts Airflow components; the staging command runs under dumb-init alone.
    entryPoint             = ["/usr/bin/dumb-init", "--"]
    command                = ["python", "-m", "raylift.aws.staging_job", "--help"] # raylift overrides it per run
    readonlyRootFilesystem = true
    mountPoints            = [{ sourceVolume = "scratch", containerPath = "/scratch", readOnly = false }]
    environment = [
      { name = "AIRFLOW_HOME", value = "/scratch/airflow" }, # Airflow's config, written on import
      { name = "HF_HOME", value = "/scratch/hf" },
      { name = "TMPDIR", value = "/scratch" },
      { name = "PYTHONUNBUFFERED", value = "1" },
    ]
    secrets = var.staging_hf_token_secret_arn == null ? [] : [
      { name = "HF_TOKEN", valueFrom = var.staging_hf_token_secret_arn },
    ]
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.staging[0].name
        awslogs-region        = data.aws_region.current.region
        awslogs-stream-prefix = "stage"
      }
    }
  }])

  tags = var.tags
}

output "staging_task_definition" {
  description = "Family of the model staging task definition (raylift's target option staging_task_definition); null without staging_image."
  value       = local.staging_enabled ? aws_ecs_task_definition.staging[0].family : null
}

output "staging_task_definition_arn_pattern" {
  description = "Every revision of the staging task definition: the Airflow role may ecs:RunTask it."
  value       = local.staging_enabled ? "${aws_ecs_task_definition.staging[0].arn_without_revision}:*" : null
}

output "staging_role_arns" {
  description = "The roles the staging task definition names: running it passes them (iam:PassRole for the Airflow role)."
  value       = local.staging_enabled ? [aws_iam_role.staging[0].arn, aws_iam_role.execution.arn] : []
}
