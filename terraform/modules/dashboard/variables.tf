variable "name" {
  description = "Dashboard name."
  type        = string
}

variable "gpu_memory_search" {
  description = "CloudWatch SEARCH expression that yields GPU memory per node (CWAgent nvidia_smi on ECS, Container Insights on EKS)."
  type        = string
}

variable "metric_namespace" {
  description = "Namespace raylift publishes its benchmark metrics to."
  type        = string
  default     = "raylift"
}

variable "benchmark_metrics" {
  description = "raylift benchmark metrics (dimensions Model, Target, RunId) shown one widget each: the names raylift.hooks.cloudwatch publishes."
  type        = list(string)
  default     = ["TimeToFirstTokenP50", "TimeToFirstTokenP99", "InterTokenLatencyP50", "OutputTokensPerSecond", "ErrorRate"]
}

variable "period_seconds" {
  description = "Aggregation period of every widget."
  type        = number
  default     = 60
}
