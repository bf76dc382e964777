# A customer-managed key for the model bucket: SSE-KMS with a bucket key keeps KMS calls cheap,
# and the key policy leaves grants to IAM policies (the Airflow, Ray and CodeBuild roles).
data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

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
}

resource "aws_kms_key" "models" {
  description             = "SSE-KMS key of the raylift model bucket ${var.bucket_name}"
  enable_key_rotation     = true
  deletion_window_in_days = 14
  policy                  = data.aws_iam_policy_document.key.json
  tags                    = var.tags
}

resource "aws_kms_alias" "models" {
  name          = "alias/${var.bucket_name}"
  target_key_id = aws_kms_key.models.key_id
}
