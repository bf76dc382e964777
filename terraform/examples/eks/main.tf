# raylift on EKS: model bucket, image pipeline, an EKS cluster with GPU / Graviton / Inferentia2
# node groups, KubeRay, Karpenter and Pod Identity, the Airflow workers' policy, and a dashboard.
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
  source                   = "../../modules/eks_ray"
  name                     = var.name
  vpc_id                   = var.vpc_id
  subnet_ids               = var.private_subnet_ids
  endpoint_public_access   = var.endpoint_public_access
  public_access_cidrs      = var.public_access_cidrs
  model_bucket_arn         = module.model_bucket.bucket_arn
  model_bucket_kms_key_arn = module.model_bucket.kms_key_arn
  grant_airflow_access     = true
  airflow_role_arn         = module.airflow_iam.role_arn
}

module "airflow_iam" {
  source                      = "../../modules/airflow_iam"
  name                        = "${var.name}-airflow"
  model_bucket_arn            = module.model_bucket.bucket_arn
  model_bucket_kms_key_arn    = module.model_bucket.kms_key_arn
  codebuild_project_arn       = module.image_pipeline.codebuild_project_arn
  codebuild_arm64_project_arn = module.image_pipeline.codebuild_arm64_project_arn
  ecr_repository_arn          = module.image_pipeline.repository_arn
  eks_enabled                 = true
  eks_cluster_arn             = module.ray.cluster_arn
  eks_nodegroup_arns          = module.ray.nodegroup_arns
  role_trusted_services       = var.airflow_trusted_services
  attach_to_role_names        = var.airflow_existing_role_names
}

module "dashboard" {
  source            = "../../modules/dashboard"
  name              = var.name
  gpu_memory_search = "Namespace=\"ContainerInsights\" MetricName=\"node_gpu_memory_used\" ClusterName=\"${var.name}\""
}
