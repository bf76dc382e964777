variable "region" {
  description = "AWS region of the stack."
  type        = string
  default     = "us-west-2"
}

variable "name" {
  description = "Prefix of every resource of the stack."
  type        = string
  default     = "raylift-ecs"
}

variable "vpc_id" {
  description = "Existing VPC (with private subnets that reach S3/ECR through NAT or VPC endpoints)."
  type        = string
}

variable "vpc_cidr" {
  description = "CIDR of vpc_id; the Ray dashboard, GCS and Serve ports are open to it only."
  type        = string
}

variable "private_subnet_ids" {
  description = "Private subnets for the GPU instances and Ray tasks."
  type        = list(string)
}

variable "model_bucket_name" {
  description = "Model bucket name (globally unique); null derives one from the name and account id."
  type        = string
  default     = null
}

variable "image_tag" {
  description = "Tag of the Ray + vLLM image the tasks run; each raylift build re-points it."
  type        = string
  default     = "latest"
}

variable "start_cluster" {
  description = "Start the head and workers on apply; false (default) creates the stack idle and raylift scales it up."
  type        = bool
  default     = false
}

variable "worker_count" {
  description = "Workers started on apply when start_cluster is true (2 workers + head = 3 nodes / 12 GPUs)."
  type        = number
  default     = 2
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

variable "airflow_security_group_ids" {
  description = "Security groups of the Airflow workers and triggerer: only they (and the Ray nodes) reach the Ray dashboard (8265) and GCS (6379). Empty: Airflow cannot reach the head, and raylift's ready check fails naming this variable."
  type        = list(string)
  default     = []
}

variable "staging_image" {
  description = "Image of the model staging task (the raylift Airflow image, images/airflow, pushed to ECR): raylift stages models in an ECS task beside the cluster instead of on the Airflow worker. null: no staging task; set the target option staging to in_worker."
  type        = string
  default     = null
}

variable "staging_hf_token_secret_arn" {
  description = "Secrets Manager secret (ARN) with a Hugging Face read token, given to the staging task as HF_TOKEN: gated models (the quick start's Llama 3.1). null: none."
  type        = string
  default     = null
}
