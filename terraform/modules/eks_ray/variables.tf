variable "name" {
  description = "EKS cluster name and prefix of its IAM roles."
  type        = string
  default     = "raylift"
}

variable "kubernetes_version" {
  description = "EKS Kubernetes version."
  type        = string
  default     = "1.33"
}

variable "vpc_id" {
  description = "VPC of the cluster."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets for the control plane ENIs, managed node groups and Karpenter nodes."
  type        = list(string)
}

variable "endpoint_public_access" {
  description = "Expose the Kubernetes API publicly (restricted to public_access_cidrs); keep false when applying from inside the VPC."
  type        = bool
  default     = false
}

variable "public_access_cidrs" {
  description = "CIDRs allowed to reach a public API endpoint (e.g. your workstation's /32)."
  type        = list(string)
  default     = []
}

variable "node_groups" {
  description = "Managed node groups by name: GPU (NVIDIA AMI), system (arm64, cluster controllers; never resized by raylift), Graviton arm64 and x86 CPU Ray workers (seed 001 compares them) and Inferentia2 (Neuron AMI)."
  type = map(object({
    instance_types = list(string)
    ami_type       = string
    min_size       = number
    max_size       = number
    desired_size   = number
    capacity_type  = optional(string, "ON_DEMAND")
    disk_size_gb   = optional(number, 200)
    labels         = optional(map(string), {})
    taints = optional(list(object({
      key    = string
      value  = string
      effect = string
    })), [])
  }))
  default = {
    gpu = {
      instance_types = ["g5.12xlarge"]
      ami_type       = "AL2023_x86_64_NVIDIA"
      min_size       = 0
      max_size       = 4
      desired_size   = 0
      labels         = { "raylift.io/accelerator" = "nvidia" }
      taints         = [{ key = "nvidia.com/gpu", value = "true", effect = "NO_SCHEDULE" }]
    }
    # Cluster controllers (Karpenter, CoreDNS, the KubeRay operator). raylift never resizes it.
    system = {
      instance_types = ["m7g.2xlarge"]
      ami_type       = "AL2023_ARM_64_STANDARD"
      min_size       = 2
      max_size       = 4
      desired_size   = 2
      disk_size_gb   = 100
      labels         = { "raylift.io/pool" = "system" }
    }
    # Graviton Ray workers (profile graviton: one llama.cpp pod per 8xlarge); raylift resizes it.
    graviton = {
      instance_types = ["c7g.8xlarge", "c8g.8xlarge"]
      ami_type       = "AL2023_ARM_64_STANDARD"
      min_size       = 0
      max_size       = 10
      desired_size   = 0
      disk_size_gb   = 100
      labels         = { "model-inferencing" = "cpu-arm" }
    }
    # x86 Ray workers (profile cpu-x86: the same llama.cpp pods on Intel, seed 001's comparison); raylift resizes it.
    x86 = {
      instance_types = ["c7i.8xlarge"]
      ami_type       = "AL2023_x86_64_STANDARD"
      min_size       = 0
      max_size       = 10
      desired_size   = 0
      disk_size_gb   = 100
      labels         = { "model-inferencing" = "cpu-x86" }
    }
    # Inferentia2 Ray workers (profile inf2: three TP=8 pods per inf2.48xlarge). The root volume also holds the
    # Neuron compile cache the pods mount from the node (/var/lib/raylift/neuron-compile-cache, hostPath: kept
    # across pod restarts, shared by the node's pods; plugins/raylift/kuberay/profiles.py NEURON_COMPILE_CACHE).
    inferentia = {
      instance_types = ["inf2.48xlarge"]
      ami_type       = "AL2023_x86_64_NEURON"
      min_size       = 0
      max_size       = 1
      desired_size   = 0
      disk_size_gb   = 1024
      labels         = { "raylift.io/accelerator" = "neuron" }
      taints         = [{ key = "aws.amazon.com/neuron", value = "true", effect = "NO_SCHEDULE" }]
    }
  }
}

variable "ray_namespace" {
  description = "Namespace of the RayService raylift creates."
  type        = string
  default     = "raylift"
}

variable "ray_service_account" {
  description = "Service account of the Ray pods; EKS Pod Identity gives it read access to the model bucket."
  type        = string
  default     = "raylift-ray"
}

variable "ray_auth_secret_name" {
  description = "Kubernetes Secret (key auth_token) with the Ray clusters' auth token; raylift's eks target option ray_auth_secret."
  type        = string
  default     = "ray-auth-token"
}

variable "ray_service_name" {
  description = "Name of the RayService raylift applies (eks target option rayservice_name): the load balancer serves KubeRay's <name>-serve-svc."
  type        = string
  default     = "raylift"
}

variable "serve_client_cidrs" {
  description = "CIDRs allowed to Serve through the internal load balancer (where the Airflow workers and clients run); empty: the VPC's CIDR."
  type        = list(string)
  default     = []
}

variable "model_bucket_arn" {
  description = "Model bucket the Ray pods read staged models from."
  type        = string
}

variable "model_bucket_kms_key_arn" {
  description = "Key of the model bucket (pods decrypt model files through S3)."
  type        = string
}

variable "grant_airflow_access" {
  description = "Give airflow_role_arn Kubernetes access to RayServices in ray_namespace (a plan-time switch; the ARN may be unknown)."
  type        = bool
  default     = false
}

variable "airflow_role_arn" {
  description = "IAM role of the Airflow workers (used when grant_airflow_access is true)."
  type        = string
  default     = null
}

variable "kuberay_operator_version" {
  description = "Chart version of the KubeRay operator (ray-project/kuberay-helm)."
  type        = string
  default     = "1.7.0" # authOptions.secretName (the Ray token's Secret) is in the CRD from 1.6.0 on
}

variable "aws_load_balancer_controller_version" {
  description = "Chart version of the AWS Load Balancer Controller (aws/eks-charts): binds Serve to the internal load balancer."
  type        = string
  default     = "1.13.0"
}

variable "karpenter_version" {
  description = "Chart version of Karpenter (oci://public.ecr.aws/karpenter)."
  type        = string
  default     = "1.6.3"
}

variable "nvidia_device_plugin_version" {
  description = "Chart version of the NVIDIA device plugin."
  type        = string
  default     = "0.17.1"
}

variable "neuron_chart_version" {
  description = "Chart version of the AWS Neuron helm chart (device plugin and scheduler extension for Inf2)."
  type        = string
  default     = "1.1.1"
}

variable "karpenter_head_cpu_limit" {
  description = "Most vCPUs Karpenter may launch in the ray-head NodePool (the Ray heads, amd64 and arm64)."
  type        = number
  default     = 32
}

variable "tags" {
  description = "Tags added to every AWS resource of this module."
  type        = map(string)
  default     = {}
}

variable "blue_green_gateway" {
  description = "Install Envoy Gateway and a GatewayClass, so that raylift can hold KubeRay's upgrade for a blue/green release (the eks target option gateway_class). Off: a new rayClusterConfig needs release: direct."
  type        = bool
  default     = true
}

variable "envoy_gateway_version" {
  description = "Envoy Gateway Helm chart version (oci://docker.io/envoyproxy/gateway-helm)."
  type        = string
  default     = "v1.8.2"
}

variable "gateway_class_name" {
  description = "Name of the GatewayClass KubeRay's held upgrades use (the eks target option gateway_class)."
  type        = string
  default     = "raylift"
}
