"""Shared AWS logic for the ``ecs`` and ``eks`` targets: content tags, S3 staging, identity checks.

Nothing here imports boto3 at module level, so DAG files may import the package freely.
"""
