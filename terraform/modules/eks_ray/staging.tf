# Model staging off the Airflow worker (the seed-003 shape): raylift creates a batch/v1 Job per staging in the
# Ray namespace, running `python -m raylift.aws.staging_job ...` with an emptyDir scratch volume and this
# service account, which EKS Pod Identity binds to a role that may write the model bucket (the Ray pods' role
# stays read-only). Airflow's group gets a Role to create, read and delete those Jobs and read their pods.
variable "staging_service_account" {
  description = "Service account of the model staging Jobs (raylift's target option staging_service_account); Pod Identity lets it write the model bucket."
  type        = string
  default     = "raylift-model-staging"
}

variable "staging_source_bucket_arns" {
  description = "Other buckets the staging Jobs may read models from (model_source s3://...); the model bucket is always readable."
  type        = list(string)
  default     = []
}

resource "kubernetes_service_account_v1" "staging" {
  metadata {
    name      = var.staging_service_account
    namespace = kubernetes_namespace_v1.ray.metadata[0].name
  }
}

resource "aws_iam_role" "staging" {
  name_prefix        = "${var.name}-staging-"
  assume_role_policy = data.aws_iam_policy_document.pod_identity_assume.json
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
      values   = ["s3.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "staging" {
  name   = "stage-models"
  role   = aws_iam_role.staging.id
  policy = data.aws_iam_policy_document.staging.json
}

resource "aws_eks_pod_identity_association" "staging" {
  cluster_name    = aws_eks_cluster.ray.name
  namespace       = kubernetes_namespace_v1.ray.metadata[0].name
  service_account = kubernetes_service_account_v1.staging.metadata[0].name
  role_arn        = aws_iam_role.staging.arn
  tags            = var.tags
}

resource "kubernetes_role_v1" "airflow_staging" {
  count = var.grant_airflow_access ? 1 : 0
  metadata {
    name      = "raylift-airflow-staging"
    namespace = kubernetes_namespace_v1.ray.metadata[0].name
  }

  rule {
    api_groups = ["batch"]
    resources  = ["jobs"]
    verbs      = ["get", "list", "watch", "create", "delete"]
  }

  rule {
    api_groups = [""]
    resources  = ["pods/log"]
    verbs      = ["get"]
  }
}

resource "kubernetes_role_binding_v1" "airflow_staging" {
  count = var.grant_airflow_access ? 1 : 0
  metadata {
    name      = "raylift-airflow-staging"
    namespace = kubernetes_namespace_v1.ray.metadata[0].name
  }
  role_ref {
    api_group = "rbac.authorization.k8s.io"
    kind      = "Role"
    name      = kubernetes_role_v1.airflow_staging[0].metadata[0].name
  }
  subject {
    kind      = "Group"
    name      = local.airflow_group
    api_group = "rbac.authorization.k8s.io"
  }
}

output "staging_service_account" {
  description = "Service account of the model staging Jobs (raylift's target option staging_service_account)."
  value       = kubernetes_service_account_v1.staging.metadata[0].name
}

output "staging_role_arn" {
  description = "IAM role the staging Jobs get through EKS Pod Identity (writes the model bucket)."
  value       = aws_iam_role.staging.arn
}
