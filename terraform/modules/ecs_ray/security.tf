# Ray tasks reach each other on every port (GCS, raylets, object transfer, workers). From the rest of the
# VPC only Serve is open; the dashboard / Jobs API and GCS (cluster control: submit code, read state) and the
# head's metrics export (read only: a blue/green promote waits there for Serve's proxy to carry no request) only
# to the Airflow workers' security groups. Nothing from outside the VPC. Ray's token auth is on as well.
resource "aws_security_group" "ray" {
  name_prefix = "${var.name}-ray-"
  description = "Ray head and workers of ${var.name}"
  vpc_id      = var.vpc_id
  tags        = var.tags

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_ingress_rule" "serve_from_vpc" {
  security_group_id = aws_security_group.ray.id
  description       = "Ray Serve (the OpenAI endpoint) from inside the VPC"
  cidr_ipv4         = var.vpc_cidr
  ip_protocol       = "tcp"
  from_port         = var.ray_ports["serve"]
  to_port           = var.ray_ports["serve"]
}

resource "aws_vpc_security_group_ingress_rule" "control_plane_from_airflow" {
  for_each = {
    for pair in setproduct(["dashboard", "gcs", "metrics"], var.control_plane_security_group_ids) : "${pair[0]}-${pair[1]}" => pair
  }
  security_group_id            = aws_security_group.ray.id
  description                  = "Ray ${each.value[0]} from the Airflow workers"
  referenced_security_group_id = each.value[1]
  ip_protocol                  = "tcp"
  from_port                    = var.ray_ports[each.value[0]]
  to_port                      = var.ray_ports[each.value[0]]
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
