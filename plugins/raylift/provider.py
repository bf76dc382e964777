"""Provider metadata: lets Airflow discover raylift through the ``apache_airflow_provider`` entry point.

It declares the ``raylift_cluster`` connection type (``raylift.hooks.raylift_cluster``) with its form fields, the
declarative way Airflow 3.2+ reads them (``conn-fields`` / ``ui-field-behaviour``, no hook import in the UI).
"""

from __future__ import annotations

from typing import Any

_TEXT = {"type": ["string", "null"]}

CLUSTER_CONN_FIELDS: dict[str, Any] = {
    "kind": {
        "label": "Kind",
        "description": "local (raylift starts Ray here), ray (a Ray cluster raylift did not start), ecs, or eks",
        "schema": {"type": "string", "enum": ["local", "ray", "ecs", "eks"], "default": "ray"},
    },
    "dashboard_url": {
        "label": "Ray dashboard URL",
        "description": "ray: the cluster's dashboard (http://ray-head:8265); its token goes only here",
        "schema": _TEXT,
    },
    "serve_url": {
        "label": "Serve URL",
        "description": "ray: the cluster's Serve endpoint (http://ray-head:8000)",
        "schema": _TEXT,
    },
    "cluster": {"label": "ECS cluster", "description": "ecs: the ECS cluster's name", "schema": _TEXT},
    "cloud_map_namespace": {
        "label": "Cloud Map namespace",
        "description": "ecs: the namespace the Ray head registers in (service discovery)",
        "schema": _TEXT,
    },
    "cluster_name": {"label": "EKS cluster", "description": "eks: the EKS cluster's name", "schema": _TEXT},
    "worker_nodegroup": {"label": "EKS worker node group", "description": "eks: the node group raylift scales",
                         "schema": _TEXT},
    "namespace": {"label": "Kubernetes namespace", "description": "eks: the RayService's namespace (raylift)",
                  "schema": _TEXT},
    "rayservice_name": {"label": "RayService", "description": "eks: the RayService's name (raylift)", "schema": _TEXT},
    "bucket": {"label": "S3 bucket", "description": "ecs/eks: models, release state and the writer lease",
               "schema": _TEXT},
    "model_store": {
        "label": "Model / state store",
        "description": "local/ray: a folder or s3:// prefix holding models, release state and the writer lease",
        "schema": _TEXT,
    },
    "region_name": {"label": "AWS region", "description": "ecs/eks: the cluster's region", "schema": _TEXT},
    "aws_conn_id": {"label": "AWS connection", "description": "the AWS connection for this cluster's APIs and store",
                    "schema": _TEXT},
    "redeploy": {
        "label": "Scheduled redeploys",
        "description": "raylift_redeploy re-runs this cluster's last good deploy on its schedule and on staged models",
        "schema": {"type": "boolean", "default": False},
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "raylift",
        "name": "raylift",
        "description": "Deploy LLMs on Ray Serve + vLLM (local, ECS, EKS/KubeRay) and benchmark them.",
        "versions": ["0.1.0"],
        "connection-types": [
            {
                "connection-type": "raylift_cluster",
                "hook-class-name": "raylift.hooks.raylift_cluster.RayliftClusterHook",
                "hook-name": "raylift cluster (Ray Serve + vLLM)",
                "conn-fields": CLUSTER_CONN_FIELDS,
                "ui-field-behaviour": {
                    "hidden-fields": ["host", "port", "schema", "login"],
                    "relabeling": {"password": "Ray auth token"},
                    "placeholders": {"password": "the cluster's RAY_AUTH_TOKEN (empty: no token auth)"},
                },
            }
        ],
    }
