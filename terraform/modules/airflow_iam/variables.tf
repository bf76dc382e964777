variable "name" {
  description = "Name of the IAM policy (and role, when create_role is true)."
  type        = string
}

variable "model_bucket_arn" {
  description = "Model bucket: raylift stages models, serve-app packages, build contexts and run records there."
  type        = string
}

variable "model_bucket_kms_key_arn" {
  description = "Key of the model bucket; S3 Get/Put of SSE-KMS objects needs kms:Decrypt / GenerateDataKey."
  type        = string
}

variable "codebuild_project_arn" {
  description = "CodeBuild project raylift starts and polls."
  type        = string
}

variable "codebuild_arm64_project_arn" {
  description = "The arm64 CodeBuild project raylift starts for Graviton images (null: none)."
  type        = string
  default     = null
}

variable "ecr_repository_arn" {
  description = "ECR repository raylift checks for an existing image tag."
  type        = string
}

variable "ecs_enabled" {
  description = "Grant the ECS target's calls (set with ecs_service_arns, cloudmap_namespace_name)."
  type        = bool
  default     = false
}

variable "eks_enabled" {
  description = "Grant the EKS target's calls (set with eks_cluster_arn, eks_nodegroup_arns)."
  type        = bool
  default     = false
}

variable "ecs_service_arns" {
  description = "ECS services raylift scales and describes (Ray head and workers)."
  type        = list(string)
  default     = []
}

variable "ecs_task_definition_arns" {
  description = "Task-definition families (ARN patterns, family:*) raylift registers revisions of when it rolls out an image."
  type        = list(string)
  default     = []
}

variable "ecs_task_role_arns" {
  description = "Task and task-execution roles of those task definitions, which registering a revision passes."
  type        = list(string)
  default     = []
}

variable "ecs_staging_enabled" {
  description = "Grant running the model staging task (the ecs_ray module's staging_image is set): RunTask of ecs_staging_task_definition_arns, passing ecs_staging_role_arns."
  type        = bool
  default     = false
}

variable "ecs_staging_task_definition_arns" {
  description = "The staging task definition's revisions (ARN pattern family:*; the ecs_ray output staging_task_definition_arn_pattern)."
  type        = list(string)
  default     = []
}

variable "ecs_staging_role_arns" {
  description = "The roles the staging task definition names (the ecs_ray output staging_role_arns): RunTask passes them."
  type        = list(string)
  default     = []
}

variable "ecs_blue_green_service_arns" {
  description = "The second (-green) head and worker services a blue/green release creates beside ecs_service_arns; the pairs alternate, so raylift creates and deletes both pairs."
  type        = list(string)
  default     = []
}

variable "cloudmap_service_arns" {
  description = "Cloud Map services raylift registers in: the user endpoint's (one instance, moved at a blue/green switch) and the green head's."
  type        = list(string)
  default     = []
}

variable "cloudmap_namespace_name" {
  description = "Cloud Map namespace in which raylift discovers the Ray head (null without ECS)."
  type        = string
  default     = null
}

variable "eks_cluster_arn" {
  description = "EKS cluster raylift describes (null when the stack has no EKS target)."
  type        = string
  default     = null
}

variable "eks_nodegroup_arns" {
  description = "Managed node groups raylift resizes (UpdateNodegroupConfig)."
  type        = list(string)
  default     = []
}

variable "metric_namespace" {
  description = "The only CloudWatch namespace raylift may publish benchmark metrics to."
  type        = string
  default     = "raylift"
}

variable "create_role" {
  description = "Create a role for the Airflow workers (else attach the policy to attach_to_role_names only)."
  type        = bool
  default     = true
}

variable "role_trusted_services" {
  description = "Service principals allowed to assume the created role (where Airflow workers run)."
  type        = list(string)
  default     = ["ecs-tasks.amazonaws.com"]
}

variable "attach_to_role_names" {
  description = "Existing roles (e.g. an MWAA or EC2 worker role) that get the policy too."
  type        = list(string)
  default     = []
}

variable "tags" {
  description = "Tags added to every resource of this module."
  type        = map(string)
  default     = {}
}
