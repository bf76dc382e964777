# Ray's control plane on EKS: token auth and a NetworkPolicy.
# The token lives in a Kubernetes Secret (key auth_token) that raylift's RayServices name in
# authOptions.secretName (target option ray_auth_secret): KubeRay (>= 1.6.0) sets RAY_AUTH_MODE=token and
# RAY_AUTH_TOKEN on every Ray container and sends the token on its own dashboard calls.
resource "random_password" "ray_auth" {
  length  = 48
  special = false
}

resource "kubernetes_secret_v1" "ray_auth" {
  metadata {
    name      = var.ray_auth_secret_name
    namespace = kubernetes_namespace_v1.ray.metadata[0].name
  }
  data = {
    auth_token = random_password.ray_auth.result
  }
  type = "Opaque"
}

# Ray pods accept the dashboard / Jobs API (8265), GCS (6379) and Ray client (10001) only from Ray pods of
# this namespace and from the KubeRay operator; Serve (8000) stays open to the cluster's clients.
resource "kubernetes_network_policy_v1" "ray_control_plane" {
  metadata {
    name      = "ray-control-plane"
    namespace = kubernetes_namespace_v1.ray.metadata[0].name
  }
  spec {
    pod_selector {
      match_labels = { "app.kubernetes.io/created-by" = "kuberay-operator" }
    }
    policy_types = ["Ingress"]

    ingress { # Ray nodes of this namespace talk to each other on every port
      from {
        pod_selector {}
      }
    }

    ingress { # the KubeRay operator reads the dashboard and health endpoints
      from {
        namespace_selector {
          match_labels = { "kubernetes.io/metadata.name" = helm_release.kuberay_operator.namespace }
        }
      }
      ports {
        port     = "8265"
        protocol = "TCP"
      }
      ports {
        port     = "52365"
        protocol = "TCP"
      }
    }

    ingress { # Serve: the OpenAI endpoint
      ports {
        port     = "8000"
        protocol = "TCP"
      }
    }
  }
}
