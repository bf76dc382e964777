variable "name" {
  description = "Name shared by the ECR repository and the CodeBuild project (e.g. raylift-ray-vllm)."
  type        = string
}

variable "source_bucket_name" {
  description = "Bucket that holds the build contexts raylift uploads (the model bucket)."
  type        = string
}

variable "source_bucket_arn" {
  description = "ARN of source_bucket_name; CodeBuild reads its build-context/ prefix."
  type        = string
}

variable "source_kms_key_arn" {
  description = "KMS key of the source bucket; CodeBuild decrypts the build context with it."
  type        = string
}

variable "source_prefix" {
  description = "Key prefix under which raylift uploads build-context zips."
  type        = string
  default     = "build-context"
}

variable "buildspec" {
  description = "Path of the buildspec inside the build context."
  type        = string
  default     = "images/buildspec.yml"
}

variable "dockerfile" {
  description = "Default Dockerfile (relative to the build context); raylift may override DOCKERFILE per build."
  type        = string
  default     = "images/ray-vllm/Dockerfile"
}

variable "build_context" {
  description = "Default docker build context directory inside the uploaded source."
  type        = string
  default     = "."
}

variable "compute_type" {
  description = "CodeBuild compute type; vLLM images are large, so the default has room for them."
  type        = string
  default     = "BUILD_GENERAL1_LARGE"
}

variable "build_image" {
  description = "CodeBuild managed image that runs docker build."
  type        = string
  default     = "aws/codebuild/amazonlinux2-x86_64-standard:5.0"
}

variable "arm64_build_image" {
  description = "CodeBuild managed arm64 image of the <name>-arm64 project (Graviton images build natively)."
  type        = string
  default     = "aws/codebuild/amazonlinux-aarch64-standard:3.0"
}

variable "arm64_compute_type" {
  description = "Compute type of the arm64 project (ARM_CONTAINER takes BUILD_GENERAL1_SMALL or _LARGE)."
  type        = string
  default     = "BUILD_GENERAL1_LARGE"
}

variable "build_timeout_minutes" {
  description = "Upper bound of one image build."
  type        = number
  default     = 60
}

variable "images_to_keep" {
  description = "ECR keeps this many most recent images and expires the rest."
  type        = number
  default     = 10
}

variable "log_retention_days" {
  description = "Retention of the CodeBuild log group."
  type        = number
  default     = 365
}

variable "tags" {
  description = "Tags added to every resource of this module."
  type        = map(string)
  default     = {}
}
