# GPU instances for both capacity providers: the Amazon Linux 2023 ECS GPU-optimised AMI (looked up through
# its public SSM parameter, so each apply picks up the latest), IMDSv2 only, encrypted root volume. Its NVIDIA
# 580 driver runs the CUDA 13 ray-vllm-gpu image; the AL2 GPU AMI (driver 550, end of life 2026-06-30) does not.
# plugins/raylift/data/gpu_drivers.json holds the figures and tests/infra/test_gpu_ami.py checks them.
data "aws_ssm_parameter" "ecs_gpu_ami" {
  name = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
}

locals {
  # a blue/green release runs a second pair beside the serving one until the switch: room for it when enabled
  surge = var.blue_green_surge ? 2 : 1
  node_roles = {
    head   = { instance_type = var.head_instance_type, min = 0, max = local.surge } # managed scaling launches it on demand
    worker = { instance_type = var.worker_instance_type, min = 0, max = local.surge * var.max_workers }
  }
}

resource "aws_launch_template" "ray" {
  for_each               = local.node_roles
  name_prefix            = "${var.name}-${each.key}-"
  image_id               = data.aws_ssm_parameter.ecs_gpu_ami.value
  instance_type          = each.value.instance_type
  vpc_security_group_ids = [aws_security_group.instances.id]
  ebs_optimized          = true
  user_data = base64encode(templatefile("${path.module}/user_data.sh.tftpl", {
    cluster_name = var.name
    node_role    = each.key
  }))

  iam_instance_profile {
    arn = aws_iam_instance_profile.instances.arn
  }

  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1 # tasks use awsvpc ENIs and never need the instance metadata
  }

  monitoring {
    enabled = true
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = var.root_volume_gb
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = merge(var.tags, { Name = "${var.name}-${each.key}" })
  }

  tags = var.tags
}

resource "aws_autoscaling_group" "ray" {
  for_each              = local.node_roles
  name_prefix           = "${var.name}-${each.key}-"
  vpc_zone_identifier   = var.subnet_ids
  min_size              = each.value.min
  max_size              = each.value.max
  protect_from_scale_in = true # ECS managed termination protection drains tasks first

  launch_template {
    id      = aws_launch_template.ray[each.key].id
    version = aws_launch_template.ray[each.key].latest_version
  }

  tag {
    key                 = "AmazonECSManaged"
    value               = "true"
    propagate_at_launch = true
  }

  lifecycle {
    ignore_changes = [desired_capacity] # ECS managed scaling owns it
  }
}
