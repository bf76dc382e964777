variable "bucket_name" {
  description = "Name of the S3 bucket that holds staged models, serve-app packages, build contexts and run records."
  type        = string
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete a bucket that still has objects (demo stacks only)."
  type        = bool
  default     = false
}

variable "noncurrent_version_days" {
  description = "Days a replaced object version is kept before it expires (versioning keeps every overwrite)."
  type        = number
  default     = 30
}

variable "tags" {
  description = "Tags added to every resource of this module."
  type        = map(string)
  default     = {}
}
