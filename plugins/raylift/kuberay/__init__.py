"""KubeRay on EKS: node profiles, RayService manifests and their CRD validation."""
