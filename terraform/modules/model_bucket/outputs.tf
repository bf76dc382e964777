output "bucket_name" {
  description = "Name of the model bucket."
  value       = aws_s3_bucket.models.bucket
}

output "bucket_arn" {
  description = "ARN of the model bucket (IAM policies grant on it and on its /* objects)."
  value       = aws_s3_bucket.models.arn
}

output "kms_key_arn" {
  description = "ARN of the key that encrypts the bucket; readers and writers need kms:Decrypt / GenerateDataKey on it."
  value       = aws_kms_key.models.arn
}
