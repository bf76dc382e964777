variable "region" {
  description = "AWS region of the stack."
  type        = string
  default     = "us-west-2"
}

variable "name" {
  description = "EKS cluster name and prefix of every resource."
  type        = string
  default     = "raylift-eks"
}

variable "vpc_id" {
  description = "Existing VPC (private subnets with NAT or VPC endpoints)."
  type        = string
}

variable "private_subnet_ids" {
  description = "Private subnets for the control plane, node groups and Karpenter nodes."
  type        = list(string)
}

variable "endpoint_public_access" {
  description = "Expose the Kubernetes API publicly (needed when you apply from outside the VPC)."
  type        = bool
  default     = false
}

variable "public_access_cidrs" {
  description = "CIDRs allowed to a public API endpoint, e.g. [\"203.0.113.7/32\"]."
  type        = list(string)
  default     = []
}

variable "model_bucket_name" {
  description = "Model bucket name (globally unique); null derives one from the name and account id."
  type        = string
  default     = null
}

variable "airflow_trusted_services" {
  description = "Service principals that may assume the Airflow worker role (where your Airflow runs)."
  type        = list(string)
  default     = ["ecs-tasks.amazonaws.com"]
}

variable "airflow_existing_role_names" {
  description = "Existing Airflow worker roles (e.g. MWAA's execution role) that get the raylift policy."
  type        = list(string)
  default     = []
}

variable "staging_image" {
  description = "Image of the model staging Jobs (the raylift Airflow image, images/airflow, in a registry the nodes pull from): raylift stages models in a Kubernetes Job beside the cluster instead of on the Airflow worker. null: staging stays on the worker."
  type        = string
  default     = null
}
