# Cloud Map: the head task registers as head.<namespace>, so workers (and raylift, through
# DiscoverInstances) find it without a load balancer. A blue/green release's second pair registers its head as
# head-green.<namespace> (raylift creates those services; the pairs alternate release after release), and the user
# endpoint is serve.<namespace>: one instance raylift registers, the serving head's IP, moved at the switch.
resource "aws_service_discovery_private_dns_namespace" "ray" {
  name        = var.cloudmap_namespace
  description = "Ray head discovery for ${var.name}"
  vpc         = var.vpc_id
  tags        = var.tags
}

resource "aws_service_discovery_service" "head" {
  name = "head"

  dns_config {
    namespace_id   = aws_service_discovery_private_dns_namespace.ray.id
    routing_policy = "MULTIVALUE"
    dns_records {
      type = "A"
      ttl  = 10
    }
  }

  health_check_custom_config {}

  tags = var.tags
}

# the head of the -green pair a blue/green release creates beside the terraform-created one
resource "aws_service_discovery_service" "head_green" {
  count = var.blue_green_surge ? 1 : 0
  name  = "head-green"

  dns_config {
    namespace_id   = aws_service_discovery_private_dns_namespace.ray.id
    routing_policy = "MULTIVALUE"
    dns_records {
      type = "A"
      ttl  = 10
    }
  }

  health_check_custom_config {}

  tags = var.tags
}

resource "aws_service_discovery_service" "endpoint" {
  name = var.endpoint_service_name

  dns_config {
    namespace_id   = aws_service_discovery_private_dns_namespace.ray.id
    routing_policy = "MULTIVALUE"
    dns_records {
      type = "A"
      ttl  = 10
    }
  }

  tags = var.tags
}
