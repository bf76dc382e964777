# Ray tasks reach each other on every port (GCS, raylets, object transfer, workers); from the rest of
# the VPC only the dashboard, GCS and Serve ports are open; nothing from outside the VPC.
resource "aws_security_group" "ray" {
  name_prefix = "${var.name}-ray-"
  description = "Ray head and workers of ${var.name}"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "ray_from_vpc" {
  for_each          = var.ray_ports_open_to_vpc
  security_group_id = aws_security_group.ray.id
  description       = "Ray ${each.key} from inside the VPC"
  cidr_ipv4         = var.vpc_cidr
  ip_protocol       = "tcp"
  from_port         = each.value
  to_port           = each.value
}

resource "aws_vpc_security_group_ingress_rule" "ray_between_nodes" {
  security_group_id            = aws_security_group.ray.id
  description                  = "Ray nodes talk to each other on all ports"
  referenced_security_group_id = aws_security_group.ray.id
  ip_protocol                  = "-1"
}

resource "aws_vpc_security_group_egress_rule" "ray_between_nodes" {
  security_group_id            = aws_security_group.ray.id
  description                  = "Ray nodes talk to each other on all ports"
  referenced_security_group_id = aws_security_group.ray.id
  ip_protocol                  = "-1"
}

resource "aws_vpc_security_group_egress_rule" "ray_https" {
  security_group_id = aws_security_group.ray.id
  description       = "HTTPS to AWS APIs (S3, ECR, CloudWatch) and the model hub"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_security_group" "instances" {
  name_prefix = "${var.name}-instances-"
  description = "GPU container instances of ${var.name}: no inbound, HTTPS out for the ECS agent"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "instances_https" {
  security_group_id = aws_security_group.instances.id
  description       = "HTTPS to the ECS, ECR, SSM and CloudWatch endpoints"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}
