# Cloud Map: the head task registers as head.<namespace>, so workers (and raylift, through
# DiscoverInstances) find it without a load balancer.
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
