# Karpenter: the Ray heads' nodes. Its controller gets an IAM role through Pod Identity; its nodes use their own
# role (with an EC2_LINUX access entry) and one NodePool, ray-head (amd64 and arm64 heads). The Ray workers' nodes
# are the managed node groups' (nodegroups.tf), which raylift sizes: no NodePool shares their labels.
locals {
  cluster_tag = "kubernetes.io/cluster/${var.name}"
}

resource "aws_iam_role" "karpenter_node" {
  name_prefix        = "${var.name}-karpenter-node-"
  assume_role_policy = data.aws_iam_policy_document.node_assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "karpenter_node" {
  for_each = toset([
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonSSMManagedInstanceCore",
    "CloudWatchAgentServerPolicy",
  ])
  role       = aws_iam_role.karpenter_node.name
  policy_arn = "${local.managed_policy}/${each.value}"
}

resource "aws_eks_access_entry" "karpenter_node" {
  cluster_name  = aws_eks_cluster.ray.name
  principal_arn = aws_iam_role.karpenter_node.arn
  type          = "EC2_LINUX"
  tags          = var.tags
}

resource "aws_iam_role" "karpenter_controller" {
  name_prefix        = "${var.name}-karpenter-"
  assume_role_policy = data.aws_iam_policy_document.pod_identity_assume.json
  tags               = var.tags
}

data "aws_iam_policy_document" "karpenter_controller" {
  #checkov:skip=CKV_AWS_111:EC2 launch and tagging calls are narrowed by region and by the cluster's ownership tag conditions, as in Karpenter's reference policy.
  #checkov:skip=CKV_AWS_356:Describe*, pricing and fleet calls have no resource-level permissions; the rest are narrowed by tag conditions.
  #checkov:skip=CKV_AWS_109:Instance-profile management is limited to profiles tagged for this cluster, as in Karpenter's reference policy.
  statement {
    sid = "ReadEc2"
    actions = [
      "ec2:DescribeAvailabilityZones",
      "ec2:DescribeImages",
      "ec2:DescribeInstanceTypeOfferings",
      "ec2:DescribeInstanceTypes",
      "ec2:DescribeInstances",
      "ec2:DescribeLaunchTemplates",
      "ec2:DescribeSecurityGroups",
      "ec2:DescribeSpotPriceHistory",
      "ec2:DescribeSubnets",
    ]
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestedRegion"
      values   = [local.region]
    }
  }

  statement {
    sid     = "LaunchFromSharedResources"
    actions = ["ec2:RunInstances", "ec2:CreateFleet"]
    resources = [
      "arn:${local.partition}:ec2:${local.region}::image/*",
      "arn:${local.partition}:ec2:${local.region}::snapshot/*",
      "arn:${local.partition}:ec2:${local.region}:*:security-group/*",
      "arn:${local.partition}:ec2:${local.region}:*:subnet/*",
      "arn:${local.partition}:ec2:${local.region}:*:capacity-reservation/*",
    ]
  }

  statement {
    sid     = "LaunchOwnedResources"
    actions = ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"]
    resources = [
      "arn:${local.partition}:ec2:${local.region}:*:fleet/*",
      "arn:${local.partition}:ec2:${local.region}:*:instance/*",
      "arn:${local.partition}:ec2:${local.region}:*:volume/*",
      "arn:${local.partition}:ec2:${local.region}:*:network-interface/*",
      "arn:${local.partition}:ec2:${local.region}:*:launch-template/*",
      "arn:${local.partition}:ec2:${local.region}:*:spot-instances-request/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "aws:RequestTag/${local.cluster_tag}"
      values   = ["owned"]
    }
  }

  statement {
    sid     = "TagOnLaunch"
    actions = ["ec2:CreateTags"]
    resources = [
      "arn:${local.partition}:ec2:${local.region}:*:fleet/*",
      "arn:${local.partition}:ec2:${local.region}:*:instance/*",
      "arn:${local.partition}:ec2:${local.region}:*:volume/*",
      "arn:${local.partition}:ec2:${local.region}:*:network-interface/*",
      "arn:${local.partition}:ec2:${local.region}:*:launch-template/*",
      "arn:${local.partition}:ec2:${local.region}:*:spot-instances-request/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "ec2:CreateAction"
      values   = ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]
    }
  }

  statement {
    sid     = "TagOwnedInstances"
    actions = ["ec2:CreateTags"]
    resources = [
      "arn:${local.partition}:ec2:${local.region}:*:instance/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/${local.cluster_tag}"
      values   = ["owned"]
    }
  }

  statement {
    sid     = "DeleteOwnedResources"
    actions = ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"]
    resources = [
      "arn:${local.partition}:ec2:${local.region}:*:instance/*",
      "arn:${local.partition}:ec2:${local.region}:*:launch-template/*",
    ]
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/${local.cluster_tag}"
      values   = ["owned"]
    }
  }

  statement {
    sid       = "PassNodeRole"
    actions   = ["iam:PassRole"]
    resources = [aws_iam_role.karpenter_node.arn]
    condition {
      test     = "StringEquals"
      variable = "iam:PassedToService"
      values   = ["ec2.amazonaws.com"]
    }
  }

  statement {
    sid = "ManageOwnedInstanceProfiles"
    actions = [
      "iam:AddRoleToInstanceProfile",
      "iam:CreateInstanceProfile",
      "iam:DeleteInstanceProfile",
      "iam:GetInstanceProfile",
      "iam:RemoveRoleFromInstanceProfile",
      "iam:TagInstanceProfile",
    ]
    resources = ["arn:${local.partition}:iam::${local.account_id}:instance-profile/*"]
    condition {
      test     = "StringEquals"
      variable = "aws:ResourceTag/${local.cluster_tag}"
      values   = ["owned"]
    }
  }

  statement {
    sid       = "ResolveAmis"
    actions   = ["ssm:GetParameter"]
    resources = ["arn:${local.partition}:ssm:${local.region}::parameter/aws/service/*"]
  }

  statement {
    sid       = "Pricing"
    actions   = ["pricing:GetProducts"] # no resource-level permissions
    resources = ["*"]
  }

  statement {
    sid       = "DescribeCluster"
    actions   = ["eks:DescribeCluster"]
    resources = [aws_eks_cluster.ray.arn]
  }
}

resource "aws_iam_role_policy" "karpenter_controller" {
  name   = "karpenter-controller"
  role   = aws_iam_role.karpenter_controller.id
  policy = data.aws_iam_policy_document.karpenter_controller.json
}

resource "aws_eks_pod_identity_association" "karpenter" {
  cluster_name    = aws_eks_cluster.ray.name
  namespace       = "kube-system"
  service_account = "karpenter"
  role_arn        = aws_iam_role.karpenter_controller.arn
  tags            = var.tags
}

resource "helm_release" "karpenter" {
  name       = "karpenter"
  repository = "oci://public.ecr.aws/karpenter"
  chart      = "karpenter"
  version    = var.karpenter_version
  namespace  = "kube-system"

  values = [yamlencode({
    serviceAccount = { name = "karpenter" }
    settings       = { clusterName = aws_eks_cluster.ray.name, clusterEndpoint = aws_eks_cluster.ray.endpoint }
    nodeSelector   = { "raylift.io/pool" = "system" }
  })]

  depends_on = [aws_eks_pod_identity_association.karpenter, aws_eks_node_group.ray]
}

resource "kubectl_manifest" "node_class" {
  yaml_body = yamlencode({
    apiVersion = "karpenter.k8s.aws/v1"
    kind       = "EC2NodeClass"
    metadata   = { name = "raylift" }
    spec = {
      role                       = aws_iam_role.karpenter_node.name
      amiSelectorTerms           = [{ alias = "al2023@latest" }] # picks the NVIDIA / Neuron / arm64 variant per instance type
      subnetSelectorTerms        = [for id in var.subnet_ids : { id = id }]
      securityGroupSelectorTerms = [{ id = aws_eks_cluster.ray.vpc_config[0].cluster_security_group_id }]
      metadataOptions            = { httpTokens = "required", httpPutResponseHopLimit = 1 }
      blockDeviceMappings = [{
        deviceName = "/dev/xvda"
        ebs        = { volumeSize = "200Gi", volumeType = "gp3", encrypted = true }
      }]
      tags = var.tags
    }
  })
  depends_on = [helm_release.karpenter]
}

locals {
  # One owner per pool: the worker pods of raylift's profiles run only on the managed node groups raylift sizes
  # (nodegroups.tf: they select "raylift.io/nodegroup" = <group key>, a label no NodePool carries), so Karpenter
  # never provisions for them and the two never add nodes for the same pods. Karpenter owns the Ray heads: the
  # ray-head pool gives the heads (which select karpenter.sh/nodepool = ray-head and their arch) a small untainted
  # node, amd64 for gpu-vllm and inf2, arm64 (Graviton) for graviton, so a head never waits for (or keeps alive)
  # a worker node, and runs with 0 workers.
  node_pools = {
    "ray-head" = {
      labels = { "raylift.io/pool" = "ray-head" }
      taints = []
      requirements = [
        { key = "karpenter.k8s.aws/instance-family", operator = "In", values = ["m7i", "m6i", "m7g"] },
        { key = "kubernetes.io/arch", operator = "In", values = ["amd64", "arm64"] },
        { key = "karpenter.sh/capacity-type", operator = "In", values = ["on-demand"] },
      ]
      limits = { cpu = var.karpenter_head_cpu_limit }
    }
  }
}

resource "kubectl_manifest" "node_pool" {
  for_each = local.node_pools
  yaml_body = yamlencode({
    apiVersion = "karpenter.sh/v1"
    kind       = "NodePool"
    metadata   = { name = each.key }
    spec = {
      template = {
        metadata = { labels = each.value.labels }
        spec = {
          nodeClassRef = { group = "karpenter.k8s.aws", kind = "EC2NodeClass", name = "raylift" }
          requirements = each.value.requirements
          taints       = each.value.taints
          expireAfter  = "720h"
        }
      }
      limits     = each.value.limits
      disruption = { consolidationPolicy = "WhenEmpty", consolidateAfter = "10m" }
    }
  })
  depends_on = [kubectl_manifest.node_class]
}
