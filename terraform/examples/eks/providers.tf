# The Kubernetes-side providers authenticate with a short-lived token from `aws eks get-token`
# (the caller's default credential chain); nothing is written to disk.
provider "aws" {
  region = var.region
  default_tags {
    tags = { Project = "raylift", Stack = var.name }
  }
}

locals {
  kube_exec = {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "aws"
    args        = ["eks", "get-token", "--cluster-name", module.ray.cluster_name, "--region", var.region]
  }
}

provider "kubernetes" {
  host                   = module.ray.cluster_endpoint
  cluster_ca_certificate = base64decode(module.ray.cluster_certificate_authority)
  exec {
    api_version = local.kube_exec.api_version
    command     = local.kube_exec.command
    args        = local.kube_exec.args
  }
}

provider "helm" {
  kubernetes {
    host                   = module.ray.cluster_endpoint
    cluster_ca_certificate = base64decode(module.ray.cluster_certificate_authority)
    exec {
      api_version = local.kube_exec.api_version
      command     = local.kube_exec.command
      args        = local.kube_exec.args
    }
  }
}

provider "kubectl" {
  host                   = module.ray.cluster_endpoint
  cluster_ca_certificate = base64decode(module.ray.cluster_certificate_authority)
  load_config_file       = false
  exec {
    api_version = local.kube_exec.api_version
    command     = local.kube_exec.command
    args        = local.kube_exec.args
  }
}
