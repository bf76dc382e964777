# raylift on ECS: model bucket, image pipeline, a Ray cluster as two ECS services on GPU
# capacity providers, the Airflow workers' policy, and a dashboard.
data "aws_caller_identity" "current" {}

locals {
  bucket_name = coalesce(var.model_bucket_name, "${var.name}-models-${data.aws_caller_identity.current.account_id}")
}

module "model_bucket" {
  source      = "../../modules/model_bucket"
  bucket_name = local.bucket_name
}

module "image_pipeline" {
  source             = "../../modules/image_pipeline"
  name               = "${var.name}-ray-vllm"
  source_bucket_name = module.model_bucket.bucket_name
  source_bucket_arn  = module.model_bucket.bucket_arn
  source_kms_key_arn = module.model_bucket.kms_key_arn
}

module "ray" {
  source                   = "../../modules/ecs_ray"
  name                     = var.name
  vpc_id                   = var.vpc_id
  vpc_cidr                 = var.vpc_cidr
  subnet_ids               = var.private_subnet_ids
  image                    = "${module.image_pipeline.repository_url}:${var.image_tag}"
  head_count               = var.start_cluster ? 1 : 0
  worker_count             = var.start_cluster ? var.worker_count : 0
  model_bucket_arn         = module.model_bucket.bucket_arn
  model_bucket_kms_key_arn = module.model_bucket.kms_key_arn
  model_store_uri          = "s3://${module.model_bucket.bucket_name}/models"
  control_plane_security_group_ids = var.airflow_security_group_ids
  staging_image                    = var.staging_image
  staging_hf_token_secret_arn      = var.staging_hf_token_secret_arn
}

module "airflow_iam" {
  source                      = "../../modules/airflow_iam"
  name                        = "${var.name}-airflow"
  model_bucket_arn            = module.model_bucket.bucket_arn
  model_bucket_kms_key_arn    = module.model_bucket.kms_key_arn
  codebuild_project_arn       = module.image_pipeline.codebuild_project_arn
  codebuild_arm64_project_arn = module.image_pipeline.codebuild_arm64_project_arn
  ecr_repository_arn          = module.image_pipeline.repository_arn
  ecs_enabled                 = true
  ecs_service_arns            = module.ray.service_arns
  ecs_blue_green_service_arns = module.ray.blue_green_service_arns
  cloudmap_service_arns       = module.ray.cloudmap_service_arns
  ecs_task_definition_arns    = module.ray.task_definition_family_arns
  ecs_task_role_arns          = module.ray.task_role_arns
  cloudmap_namespace_name     = module.ray.cloudmap_namespace_name
  ecs_staging_enabled         = var.staging_image != null
  ecs_staging_task_definition_arns = compact([module.ray.staging_task_definition_arn_pattern])
  ecs_staging_role_arns       = module.ray.staging_role_arns
  role_trusted_services       = var.airflow_trusted_services
  attach_to_role_names        = var.airflow_existing_role_names
}

module "dashboard" {
  source            = "../../modules/dashboard"
  name              = var.name
  gpu_memory_search = "Namespace=\"CWAgent\" MetricName=\"nvidia_smi_memory_used\""
}
