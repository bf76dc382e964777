# The ECS cluster and its two EC2 capacity providers: one for the Ray head, one for GPU workers.
resource "aws_ecs_cluster" "ray" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = "enabled"
  }

  tags = var.tags
}

resource "aws_ecs_capacity_provider" "ray" {
  for_each = local.node_roles
  name     = "${var.name}-${each.key}"

  auto_scaling_group_provider {
    auto_scaling_group_arn         = aws_autoscaling_group.ray[each.key].arn
    managed_termination_protection = "ENABLED"

    managed_scaling {
      status                    = "ENABLED"
      target_capacity           = 100
      minimum_scaling_step_size = 1
      maximum_scaling_step_size = 2
    }
  }

  tags = var.tags
}

resource "aws_ecs_cluster_capacity_providers" "ray" {
  cluster_name       = aws_ecs_cluster.ray.name
  capacity_providers = [for provider in aws_ecs_capacity_provider.ray : provider.name]

  default_capacity_provider_strategy {
    capacity_provider = aws_ecs_capacity_provider.ray["worker"].name
    weight            = 1
  }
}
