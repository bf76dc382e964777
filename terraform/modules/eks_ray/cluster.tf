# The EKS control plane: API authentication through access entries, secrets envelope-encrypted
# with a CMK, every control-plane log type on, private endpoint (public only when asked, and narrowed).
data "aws_caller_identity" "current" {}

data "aws_partition" "current" {}

data "aws_region" "current" {}

locals {
  partition      = data.aws_partition.current.partition
  account_id     = data.aws_caller_identity.current.account_id
  region         = data.aws_region.current.region
  managed_policy = "arn:${data.aws_partition.current.partition}:iam::aws:policy"
}

data "aws_iam_policy_document" "eks_key" {
  #checkov:skip=CKV_AWS_111:Key policy: resource "*" is this key only, and the account root delegates to IAM policies.
  #checkov:skip=CKV_AWS_356:Key policy: resource "*" is this key only; a key policy cannot name its own ARN before creation.
  #checkov:skip=CKV_AWS_109:Key policy: the standard account-root statement that lets IAM policies grant use of the key.
  statement {
    sid       = "AccountAdministersKeyThroughIam"
    actions   = ["kms:*"]
    resources = ["*"]
    principals {
      type        = "AWS"
      identifiers = ["arn:${local.partition}:iam::${local.account_id}:root"]
    }
  }
}

resource "aws_kms_key" "eks" {
  description             = "Envelope encryption of Kubernetes secrets in ${var.name}"
  enable_key_rotation     = true
  deletion_window_in_days = 14
  policy                  = data.aws_iam_policy_document.eks_key.json
  tags                    = var.tags
}

data "aws_iam_policy_document" "cluster_assume" {
  statement {
    actions = ["sts:AssumeRole", "sts:TagSession"]
    principals {
      type        = "Service"
      identifiers = ["eks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "cluster" {
  name_prefix        = "${var.name}-cluster-"
  assume_role_policy = data.aws_iam_policy_document.cluster_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "cluster" {
  role       = aws_iam_role.cluster.name
  policy_arn = "${local.managed_policy}/AmazonEKSClusterPolicy"
}

resource "aws_eks_cluster" "ray" {
  name                      = var.name
  version                   = var.kubernetes_version
  role_arn                  = aws_iam_role.cluster.arn
  enabled_cluster_log_types = ["api", "audit", "authenticator", "controllerManager", "scheduler"]

  access_config {
    authentication_mode                         = "API"
    bootstrap_cluster_creator_admin_permissions = true
  }

  vpc_config {
    subnet_ids              = var.subnet_ids
    endpoint_private_access = true
    endpoint_public_access  = var.endpoint_public_access
    public_access_cidrs     = var.endpoint_public_access ? var.public_access_cidrs : null
  }

  encryption_config {
    resources = ["secrets"]
    provider {
      key_arn = aws_kms_key.eks.arn
    }
  }

  depends_on = [aws_iam_role_policy_attachment.cluster]
  tags       = var.tags
}

# Add-ons: networking, DNS, Pod Identity (S3 access of the Ray pods, Karpenter) and Container
# Insights, whose GPU metrics feed the dashboard's GPU memory widget.
resource "aws_eks_addon" "this" {
  for_each                    = toset(["vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "amazon-cloudwatch-observability"])
  cluster_name                = aws_eks_cluster.ray.name
  addon_name                  = each.value
  # the VPC CNI enforces NetworkPolicies (the Ray control-plane policy in auth.tf) only when told to
  configuration_values        = each.value == "vpc-cni" ? jsonencode({ enableNetworkPolicy = "true" }) : null
  resolve_conflicts_on_create = "OVERWRITE"
  resolve_conflicts_on_update = "OVERWRITE"
  depends_on                  = [aws_eks_node_group.ray]
  tags                        = var.tags
}
