variable "name" {
  description = "Prefix of every resource (cluster, services, roles)."
  type        = string
  default     = "raylift"
}

variable "vpc_id" {
  description = "VPC that hosts the Ray nodes."
  type        = string
}

variable "vpc_cidr" {
  description = "CIDR of the VPC: the only source allowed to reach the Serve port."
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets for the GPU instances and the awsvpc task ENIs."
  type        = list(string)
}

variable "image" {
  description = "Ray + vLLM image URI (the ECR repository built by CodeBuild, with a tag)."
  type        = string
}

variable "head_instance_type" {
  description = "Instance type of the head capacity provider (the head also serves: 4 x A10G on g5.12xlarge)."
  type        = string
  default     = "g5.12xlarge"
}

variable "worker_instance_type" {
  description = "Instance type of the GPU worker capacity provider."
  type        = string
  default     = "g5.12xlarge"
}

variable "gpus_per_node" {
  description = "GPUs each Ray task claims (all of the instance's: 4 on g5.12xlarge)."
  type        = number
  default     = 4
}

variable "task_cpu" {
  description = "CPU units of a Ray task (1024 = 1 vCPU); leave room for the ECS agent."
  type        = number
  default     = 40960
}

variable "task_memory_mib" {
  description = "Memory of a Ray task in MiB; below what the instance registers with ECS."
  type        = number
  default     = 163840
}

variable "shared_memory_mib" {
  description = "/dev/shm of a Ray task: Ray's object store lives there."
  type        = number
  default     = 32768
}

variable "head_count" {
  description = "Initial head task count (1, or 0 to create the stack idle); raylift starts and stops the head afterwards."
  type        = number
  default     = 1
  validation {
    condition     = contains([0, 1], var.head_count)
    error_message = "A Ray cluster has one head: head_count must be 0 or 1."
  }
}

variable "worker_count" {
  description = "Initial number of GPU workers (2 workers + head = 3 nodes / 12 GPUs); raylift resizes it."
  type        = number
  default     = 2
}

variable "max_workers" {
  description = "Upper bound of the worker capacity provider's Auto Scaling group."
  type        = number
  default     = 4
}

variable "blue_green_surge" {
  description = "Room for a blue/green release (raylift starts a second head and worker pair beside the serving one, then retires the old): the head Auto Scaling group may hold 2 instances, the worker group 2 x max_workers."
  type        = bool
  default     = true
}

variable "endpoint_service_name" {
  description = "Cloud Map service of the user endpoint (serve.<namespace>): raylift registers one instance in it, the serving head's IP, and re-registers it at a blue/green switch."
  type        = string
  default     = "serve"
}

variable "root_volume_gb" {
  description = "Root EBS volume of each instance (images and model caches)."
  type        = number
  default     = 300
}

variable "cloudmap_namespace" {
  description = "Private DNS namespace in which the head registers, so workers find it at head.<namespace>."
  type        = string
  default     = "raylift.local"
}

variable "control_plane_security_group_ids" {
  description = "Security groups (the Airflow workers and triggerer) allowed to reach the Ray dashboard / Jobs API and GCS; nothing else outside the Ray nodes can."
  type        = list(string)
  default     = []
}

variable "ray_ports" {
  description = "Ray's ports: serve is reachable from the VPC; dashboard, gcs and metrics (the head's Prometheus export: a blue/green promote reads Serve's in-flight requests there before retiring the old pair) only from the Ray nodes and control_plane_security_group_ids."
  type        = map(number)
  default = {
    dashboard = 8265
    gcs       = 6379
    metrics   = 8080
    serve     = 8000
  }
}

variable "model_bucket_arn" {
  description = "Model bucket the Ray tasks read staged models from."
  type        = string
}

variable "model_bucket_kms_key_arn" {
  description = "Key of the model bucket (tasks decrypt model files through S3)."
  type        = string
}

variable "model_store_uri" {
  description = "s3:// prefix of the model store, passed to the tasks as RAYLIFT_MODEL_STORE."
  type        = string
}

variable "log_retention_days" {
  description = "Retention of the Ray task log group."
  type        = number
  default     = 365
}

variable "tags" {
  description = "Tags added to every resource of this module."
  type        = map(string)
  default     = {}
}
