# One key for the image repository, the build artifacts and the build logs.
data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

data "aws_region" "current" {}

data "aws_iam_policy_document" "key" {
  #checkov:skip=CKV_AWS_111:Key policy: resource "*" is this key only, and the account root delegates to IAM policies.
  #checkov:skip=CKV_AWS_356:Key policy: resource "*" is this key only; a key policy cannot name its own ARN before creation.
  #checkov:skip=CKV_AWS_109:Key policy: the standard account-root statement that lets IAM policies grant use of the key.
  statement {
    sid       = "AccountAdministersKeyThroughIam"
    actions   = ["kms:*"]
    resources = ["*"] # in a key policy "*" means this key
    principals {
      type        = "AWS"
      identifiers = ["arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"]
    }
  }

  statement {
    sid       = "CloudWatchLogsEncryptsBuildLogs"
    actions   = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
    resources = ["*"]
    principals {
      type        = "Service"
      identifiers = ["logs.${data.aws_region.current.region}.amazonaws.com"]
    }
    condition {
      test     = "ArnLike"
      variable = "kms:EncryptionContext:aws:logs:arn"
      values   = ["arn:${data.aws_partition.current.partition}:logs:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:log-group:/aws/codebuild/${var.name}"]
    }
  }
}

resource "aws_kms_key" "build" {
  description             = "Encrypts the ${var.name} image repository and build logs"
  enable_key_rotation     = true
  deletion_window_in_days = 14
  policy                  = data.aws_iam_policy_document.key.json
  tags                    = var.tags
}
