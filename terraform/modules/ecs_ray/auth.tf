# Ray's token auth (RAY_AUTH_MODE=token): one random token per stack, in Secrets Manager. The Ray tasks get
# it as RAY_AUTH_TOKEN through their execution role; the Airflow workers and triggerer need the same value as
# RAY_AUTH_TOKEN (ECS task secrets, or the password of the ray_dashboard connection via Airflow's Secrets
# Manager backend) for raylift's dashboard / Serve REST calls.
resource "random_password" "ray_auth" {
  length  = 48
  special = false
}

resource "aws_secretsmanager_secret" "ray_auth" {
  #checkov:skip=CKV2_AWS_57:Ray reads the token once at start; rotating it means restarting the cluster, which terraform does when the password is replaced.
  name_prefix = "${var.name}-ray-auth-"
  description = "Ray auth token (RAY_AUTH_TOKEN) of the ${var.name} Ray cluster"
  kms_key_id  = var.model_bucket_kms_key_arn
  tags        = var.tags
}

resource "aws_secretsmanager_secret_version" "ray_auth" {
  secret_id     = aws_secretsmanager_secret.ray_auth.id
  secret_string = random_password.ray_auth.result
}

data "aws_iam_policy_document" "read_ray_auth" {
  statement {
    sid       = "ReadRayAuthToken"
    actions   = ["secretsmanager:GetSecretValue"]
    resources = [aws_secretsmanager_secret.ray_auth.arn]
  }

  statement {
    sid       = "DecryptRayAuthToken"
    actions   = ["kms:Decrypt"]
    resources = [var.model_bucket_kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["secretsmanager.${data.aws_region.current.region}.amazonaws.com"]
    }
  }
}

resource "aws_iam_role_policy" "execution_reads_ray_auth" {
  name   = "read-ray-auth-token"
  role   = aws_iam_role.execution.id
  policy = data.aws_iam_policy_document.read_ray_auth.json
}
