# The head service (at most one task, registered in Cloud Map) and the worker service, whose
# desired count raylift changes (ecs:UpdateService); terraform leaves that number alone after creation, and the
# task-definition revision too: raylift's scale step registers a revision running each build's image (by digest)
# and moves the services to it (its rollback moves them back), which a later terraform apply must not undo.
locals {
  service_names = { for role in keys(local.node_roles) : role => "${var.name}-${role}" }
}

resource "aws_ecs_service" "head" {
  name                               = local.service_names["head"]
  cluster                            = aws_ecs_cluster.ray.id
  task_definition                    = aws_ecs_task_definition.ray["head"].arn
  desired_count                      = var.head_count
  enable_execute_command             = true
  deployment_minimum_healthy_percent = 0 # a GPU node holds one Ray task: replace, never overlap
  deployment_maximum_percent         = 100

  capacity_provider_strategy {
    capacity_provider = aws_ecs_capacity_provider.ray["head"].name
    weight            = 1
    base              = 1
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.ray.id]
    assign_public_ip = false
  }

  service_registries {
    registry_arn = aws_service_discovery_service.head.arn
  }

  lifecycle {
    ignore_changes = [desired_count, task_definition] # raylift starts (1) and stops (0) the head, rolls out images
  }

  depends_on = [aws_ecs_cluster_capacity_providers.ray]
  tags       = var.tags
}

resource "aws_ecs_service" "worker" {
  name                               = local.service_names["worker"]
  cluster                            = aws_ecs_cluster.ray.id
  task_definition                    = aws_ecs_task_definition.ray["worker"].arn
  desired_count                      = var.worker_count
  enable_execute_command             = true
  deployment_minimum_healthy_percent = 0
  deployment_maximum_percent         = 100

  capacity_provider_strategy {
    capacity_provider = aws_ecs_capacity_provider.ray["worker"].name
    weight            = 1
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [aws_security_group.ray.id]
    assign_public_ip = false
  }

  lifecycle {
    ignore_changes = [desired_count, task_definition] # raylift scales the workers, rolls out images
  }

  depends_on = [aws_ecs_service.head]
  tags       = var.tags
}
