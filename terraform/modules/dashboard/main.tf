# One dashboard for a raylift stack: GPU memory per node (did the model land where we expect?)
# next to the benchmark figures each run publishes (namespace raylift; dims Model, Target, RunId).
data "aws_region" "current" {}

locals {
  gpu_widget = {
    type   = "metric"
    x      = 0
    y      = 0
    width  = 24
    height = 6
    properties = {
      title   = "GPU memory per node"
      region  = data.aws_region.current.region
      view    = "timeSeries"
      stacked = false
      period  = var.period_seconds
      metrics = [[{ expression = "SEARCH('${var.gpu_memory_search}', 'Maximum', ${var.period_seconds})", id = "gpu", label = "" }]]
    }
  }

  benchmark_widgets = [
    for index, metric in var.benchmark_metrics : {
      type   = "metric"
      x      = (index % 3) * 8
      y      = 6 + floor(index / 3) * 6
      width  = 8
      height = 6
      properties = {
        title   = metric
        region  = data.aws_region.current.region
        view    = "timeSeries"
        stacked = false
        period  = var.period_seconds
        metrics = [[{
          expression = "SEARCH('{${var.metric_namespace},Model,Target,RunId} MetricName=\"${metric}\"', 'Average', ${var.period_seconds})"
          id         = "m${index}"
          label      = ""
        }]]
      }
    }
  ]
}

resource "aws_cloudwatch_dashboard" "raylift" {
  dashboard_name = var.name
  dashboard_body = jsonencode({ widgets = concat([local.gpu_widget], local.benchmark_widgets) })
}
