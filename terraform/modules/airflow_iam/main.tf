# Least privilege for the Airflow workers: exactly the calls raylift makes, each on its resource
# (tests/infra/test_iam_from_calls.py derives the needed actions from the calls the AWS tests record).
# sts:GetCallerIdentity, which raylift calls first, needs no permission, so it is not granted.
# Target-specific statements (ECS, EKS) appear only when the stack has that target.
data "aws_region" "current" {}

locals {
  # Known at plan time (booleans), unlike the ARNs, so they can drive the dynamic statements.
  has_ecs = var.ecs_enabled
  has_eks = var.eks_enabled
  # the staging task's statements: only when ecs_ray creates the staging task definition
  has_ecs_staging = var.ecs_enabled && var.ecs_staging_enabled
  # arn:aws:ecs:<region>:<account>:service/<cluster>/<service> -> arn:aws:ecs:<region>:<account>:cluster/<cluster>
  ecs_cluster_arns = distinct([for arn in var.ecs_service_arns : replace(arn, "/:service\\/([^\\/]+)\\/[^\\/]+$/", ":cluster/$1")])
  # every task of those clusters: arn:aws:ecs:<region>:<account>:task/<cluster>/*
  ecs_task_arns = [for arn in local.ecs_cluster_arns : "${replace(arn, ":cluster/", ":task/")}/*"]
  # both pairs of a blue/green release
  ecs_all_service_arns = concat(var.ecs_service_arns, var.ecs_blue_green_service_arns)
  # the clusters' capacity providers: arn:aws:ecs:<region>:<account>:capacity-provider/*
  ecs_capacity_provider_arns = distinct([for arn in local.ecs_cluster_arns : "${replace(arn, "/:cluster\\/.*$/", ":capacity-provider")}/*"])
}

data "aws_iam_policy_document" "airflow" {
  statement {
    sid       = "BuildImage"
    actions   = ["codebuild:StartBuild", "codebuild:BatchGetBuilds"]
    resources = compact([var.codebuild_project_arn, var.codebuild_arm64_project_arn])
  }

  statement {
    sid = "FindAndRetagImage"
    # the repository's URI, whether a content tag exists, and (ECS) the moving tag re-pointed at it
    actions   = ["ecr:DescribeRepositories", "ecr:DescribeImages", "ecr:BatchGetImage", "ecr:PutImage"]
    resources = [var.ecr_repository_arn]
  }

  statement {
    sid       = "ListModelStore"
    actions   = ["s3:ListBucket"]
    resources = [var.model_bucket_arn]
  }

  statement {
    sid       = "ReadWriteModelStore"
    actions   = ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"]
    resources = ["${var.model_bucket_arn}/*"]
  }

  statement {
    sid       = "EncryptModelStoreObjects"
    actions   = ["kms:Decrypt", "kms:GenerateDataKey"]
    resources = [var.model_bucket_kms_key_arn]
    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${data.aws_region.current.region}.amazonaws.com"]
    }
  }

  statement {
    sid       = "PublishBenchmarkMetrics"
    actions   = ["cloudwatch:PutMetricData"] # resource-less call, narrowed by namespace below
    resources = ["*"]
    condition {
      test     = "StringEquals"
      variable = "cloudwatch:namespace"
      values   = [var.metric_namespace]
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid       = "ScaleRayServices" # and move them to a task-definition revision (an image rollout or its rollback)
      actions   = ["ecs:UpdateService", "ecs:DescribeServices"]
      resources = local.ecs_all_service_arns
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "BlueGreenRayServices"
      # a blue/green release creates the other pair beside the serving one, and deletes the retired (or rejected)
      # pair; the pairs alternate, so both pairs' names
      actions   = ["ecs:CreateService", "ecs:DeleteService"]
      resources = local.ecs_all_service_arns
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "TagRayServicesOnCreate"
      # a green service carries its blue one's tags (tag-on-create); no existing resource can be tagged
      actions   = ["ecs:TagResource"]
      resources = local.ecs_all_service_arns
      condition {
        test     = "StringEquals"
        variable = "ecs:CreateAction"
        values   = ["CreateService"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "RoomForGreen"
      # a blue/green release's capacity check: what the clusters' container instances have left, and the capacity
      # providers, whose Auto Scaling groups may still grow
      actions   = ["ecs:ListContainerInstances", "ecs:DescribeCapacityProviders"]
      resources = concat(local.ecs_cluster_arns, local.ecs_capacity_provider_arns)
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid       = "CapacityProviderGroups" # their MaxSize and instances (and EC2's DescribeInstances, granted above)
      actions   = ["autoscaling:DescribeAutoScalingGroups"] # describe call: no resource-level permissions exist
      resources = ["*"]
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "FindCloudMapServices"
      # list calls: no resource-level permissions
      actions   = ["servicediscovery:ListNamespaces", "servicediscovery:ListServices"]
      resources = ["*"]
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid       = "MoveTheEndpoint" # the endpoint's one instance: moved to the serving head's IP, removed at a teardown
      actions   = ["servicediscovery:RegisterInstance", "servicediscovery:DeregisterInstance"]
      resources = var.cloudmap_service_arns
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "ReadRayTaskDefinitions"
      # an image rollout copies the services' task definitions (with their tags); a describe call with no
      # resource-level permissions
      actions   = ["ecs:DescribeTaskDefinition"]
      resources = ["*"]
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "RegisterRayTaskDefinitionRevisions"
      # a new revision of the head/worker families running the build's image (by digest)
      actions   = ["ecs:RegisterTaskDefinition"]
      resources = var.ecs_task_definition_arns
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "TagRayTaskDefinitionRevisionsOnCreate"
      # the revision carries the tags of the one it copies (tag-on-create); no existing resource can be tagged
      actions   = ["ecs:TagResource"]
      resources = var.ecs_task_definition_arns
      condition {
        test     = "StringEquals"
        variable = "ecs:CreateAction"
        values   = ["RegisterTaskDefinition"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "PassRayTaskRoles"
      # the revision names the same task and execution roles as the one it copies
      actions   = ["iam:PassRole"]
      resources = var.ecs_task_role_arns
      condition {
        test     = "StringEquals"
        variable = "iam:PassedToService"
        values   = ["ecs-tasks.amazonaws.com"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "StopDrainedRayWorkers"
      # a scale-in stops exactly the worker tasks whose Ray nodes Ray drained (raylift.targets.scale_in)
      actions   = ["ecs:StopTask"]
      resources = local.ecs_task_arns
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs_staging ? [1] : []
    content {
      sid = "RunModelStagingTask"
      # staging runs beside the cluster, not on the Airflow worker (raylift.targets.ecs_staging, raylift.targets.eks_staging), in the Ray
      # services' own clusters
      actions   = ["ecs:RunTask"]
      resources = var.ecs_staging_task_definition_arns
      condition {
        test     = "ArnEquals"
        variable = "ecs:cluster"
        values   = local.ecs_cluster_arns
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs_staging ? [1] : []
    content {
      sid = "TagModelStagingTaskOnCreate"
      # RunTask tags the task it starts (tag-on-create); no existing resource can be tagged
      actions   = ["ecs:TagResource"]
      resources = ["*"]
      condition {
        test     = "StringEquals"
        variable = "ecs:CreateAction"
        values   = ["RunTask"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs_staging ? [1] : []
    content {
      sid       = "PassModelStagingRoles"
      actions   = ["iam:PassRole"]
      resources = var.ecs_staging_role_arns
      condition {
        test     = "StringEquals"
        variable = "iam:PassedToService"
        values   = ["ecs-tasks.amazonaws.com"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "PriceRayServiceInstances"
      # The benchmark's cost: which container instances run the Ray services' tasks (read-only), in the
      # services' own clusters.
      actions   = ["ecs:ListTasks", "ecs:DescribeTasks", "ecs:DescribeContainerInstances"]
      resources = ["*"]
      condition {
        test     = "ArnEquals"
        variable = "ecs:cluster"
        values   = local.ecs_cluster_arns
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid       = "InstanceTypesOfRayServices"
      actions   = ["ec2:DescribeInstances", "ec2:DescribeInstanceTypes"] # describe calls: no resource-level permissions exist
      resources = ["*"]
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid       = "ReadScalingBounds"
      actions   = ["application-autoscaling:DescribeScalableTargets"] # list call: no resource-level permissions
      resources = ["*"]
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid = "SetWorkerScalingBounds"
      # Scalable targets are named by random ids, so none can be listed up front; the condition keys
      # narrow the call to the desired count of ECS services.
      actions   = ["application-autoscaling:RegisterScalableTarget"]
      resources = ["*"]
      condition {
        test     = "StringEquals"
        variable = "application-autoscaling:service-namespace"
        values   = ["ecs"]
      }
      condition {
        test     = "StringEquals"
        variable = "application-autoscaling:scalable-dimension"
        values   = ["ecs:service:DesiredCount"]
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_ecs ? [1] : []
    content {
      sid       = "DiscoverRayHead"
      actions   = ["servicediscovery:DiscoverInstances"] # resource-less call, narrowed by namespace
      resources = ["*"]
      condition {
        test     = "StringEquals"
        variable = "servicediscovery:NamespaceName"
        values   = [var.cloudmap_namespace_name]
      }
    }
  }

  dynamic "statement" {
    for_each = local.has_eks ? [1] : []
    content {
      sid       = "DescribeCluster"
      actions   = ["eks:DescribeCluster"]
      resources = [var.eks_cluster_arn]
    }
  }

  dynamic "statement" {
    for_each = local.has_eks ? [1] : []
    content {
      sid       = "ResizeNodegroups"
      actions   = ["eks:DescribeNodegroup", "eks:UpdateNodegroupConfig"]
      resources = var.eks_nodegroup_arns
    }
  }

  dynamic "statement" {
    for_each = local.has_eks ? [1] : []
    content {
      sid = "GpusPerInstanceType"
      # describe calls: no resource-level permissions exist. DescribeInstances: the node group's instances' private
      # IPs, which a scale-in matches with the Ray pods' hostIP
      actions   = ["ec2:DescribeInstanceTypes", "ec2:DescribeInstances", "autoscaling:DescribeAutoScalingGroups"]
      resources = ["*"]
    }
  }

  # A scale-in removes exactly the instances whose Ray pods were drained, from the node group's Auto Scaling group
  # (EKS names it; it carries EKS's eks:cluster-name tag), lowering its desired capacity with them.
  dynamic "statement" {
    for_each = local.has_eks ? [1] : []
    content {
      sid       = "RemoveDrainedNodes"
      actions   = ["autoscaling:TerminateInstanceInAutoScalingGroup"]
      resources = ["*"]
      condition {
        test     = "StringEquals"
        variable = "autoscaling:ResourceTag/eks:cluster-name"
        values   = [element(split("/", var.eks_cluster_arn), 1)]
      }
    }
  }
}

resource "aws_iam_policy" "airflow" {
  name        = var.name
  description = "What the raylift Airflow tasks call, and nothing else"
  policy      = data.aws_iam_policy_document.airflow.json
  tags        = var.tags
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = var.role_trusted_services
    }
  }
}

resource "aws_iam_role" "airflow" {
  count              = var.create_role ? 1 : 0
  name               = var.name
  assume_role_policy = data.aws_iam_policy_document.assume.json
  tags               = var.tags
}

resource "aws_iam_role_policy_attachment" "created" {
  count      = var.create_role ? 1 : 0
  role       = aws_iam_role.airflow[0].name
  policy_arn = aws_iam_policy.airflow.arn
}

resource "aws_iam_role_policy_attachment" "existing" {
  for_each   = toset(var.attach_to_role_names)
  role       = each.value
  policy_arn = aws_iam_policy.airflow.arn
}
