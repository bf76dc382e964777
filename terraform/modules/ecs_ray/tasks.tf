# Task definitions: one Ray container per GPU instance, claiming all its GPUs.
resource "aws_cloudwatch_log_group" "ray" {
  #checkov:skip=CKV_AWS_158:Ray logs hold no secrets and CloudWatch encrypts them at rest by default; a CMK here adds cost without a reader to restrict.
  name              = "/ecs/${var.name}"
  retention_in_days = var.log_retention_days
  tags              = var.tags
}

locals {
  head_address = "${aws_service_discovery_service.head.name}.${var.cloudmap_namespace}"
  ray_commands = {
    head = "exec ray start --head --port=${var.ray_ports["gcs"]} --dashboard-host=0.0.0.0 --dashboard-port=${var.ray_ports["dashboard"]} --metrics-export-port=${var.ray_ports["metrics"]} --num-gpus=${var.gpus_per_node} --disable-usage-stats --block"
    # Workers wait for their head's DNS record, then join; ECS restarts them if the head goes away. They read the
    # head from RAY_HEAD_ADDRESS: a blue/green release's green workers get green's head there (raylift's revision).
    worker = "until getent hosts $${RAY_HEAD_ADDRESS%:*}; do echo waiting for $RAY_HEAD_ADDRESS; sleep 5; done; exec ray start --address=$RAY_HEAD_ADDRESS --num-gpus=${var.gpus_per_node} --disable-usage-stats --block"
  }
}

resource "aws_ecs_task_definition" "ray" {
  for_each                 = local.node_roles
  family                   = "${var.name}-${each.key}"
  requires_compatibilities = ["EC2"]
  network_mode             = "awsvpc"
  cpu                      = var.task_cpu
  memory                   = var.task_memory_mib
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.task.arn

  container_definitions = jsonencode([{
    name       = "ray_${each.key}"
    image      = var.image
    essential  = true
    entryPoint = ["/bin/bash", "-lc"]
    command    = [local.ray_commands[each.key]]
    resourceRequirements = [{ type = "GPU", value = tostring(var.gpus_per_node) }]
    portMappings = [for port in values(var.ray_ports) : { containerPort = port, protocol = "tcp" }]
    # Ray's token auth: dashboard, Jobs API and GCS refuse callers without the token (Secrets Manager).
    secrets = [{ name = "RAY_AUTH_TOKEN", valueFrom = aws_secretsmanager_secret.ray_auth.arn }]
    environment = [
      { name = "RAY_AUTH_MODE", value = "token" },
      { name = "RAYLIFT_MODEL_STORE", value = var.model_store_uri },
      { name = "RAY_HEAD_ADDRESS", value = "${local.head_address}:${var.ray_ports["gcs"]}" },
    ]
    linuxParameters = {
      initProcessEnabled = true # ECS Exec
      sharedMemorySize   = var.shared_memory_mib
    }
    ulimits = [{ name = "nofile", softLimit = 65536, hardLimit = 65536 }]
    healthCheck = each.key == "head" ? {
      command     = ["CMD-SHELL", "ray health-check --address 127.0.0.1:${var.ray_ports["gcs"]} || exit 1"]
      interval    = 30
      timeout     = 10
      retries     = 3
      startPeriod = 120
    } : null
    logConfiguration = {
      logDriver = "awslogs"
      options = {
        awslogs-group         = aws_cloudwatch_log_group.ray.name
        awslogs-region        = data.aws_region.current.region
        awslogs-stream-prefix = each.key
      }
    }
  }])

  tags = var.tags
}
