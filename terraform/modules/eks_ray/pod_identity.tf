# The Ray pods' identity: a namespace and service account whose pods get read access to the model
# bucket through EKS Pod Identity (no node-wide S3 grant, no OIDC provider to manage).
resource "kubernetes_namespace_v1" "ray" {
  metadata {
    name = var.ray_namespace
  }
}

resource "kubernetes_service_account_v1" "ray" {
  metadata {
    name      = var.ray_service_account
    namespace = kubernetes_namespace_v1.ray.metadata[0].name
  }
}

data "aws_iam_policy_document" "pod_identity_assume" {
  statement {
    actions = ["sts:AssumeRole", "sts:TagSession"]
    principals {
      type        = "Service"
      identifiers = ["pods.eks.amazonaws.com"]
    }
    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [local.account_id]
    }
  }
}

resource "aws_iam_role" "ray_pods" {
  name_prefix        = "${var.name}-ray-pods-"
  assume_role_policy = data.aws_iam_policy_document.pod_identity_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "ray_pods" {
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
      values   = ["s3.${local.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "ray_pods" {
  name   = "read-models"
  role   = aws_iam_role.ray_pods.id
  policy = data.aws_iam_policy_document.ray_pods.json
}

resource "aws_eks_pod_identity_association" "ray" {
  cluster_name    = aws_eks_cluster.ray.name
  namespace       = kubernetes_namespace_v1.ray.metadata[0].name
  service_account = kubernetes_service_account_v1.ray.metadata[0].name
  role_arn        = aws_iam_role.ray_pods.arn
  tags            = var.tags
}
