"""Provider metadata: lets Airflow discover raylift through the ``apache_airflow_provider`` entry point.

Shaped as the Apache providers fill theirs (``get_provider_info`` in apache-airflow-providers-amazon): the
integrations, and per integration the modules of operators, sensors, hooks and triggers, so that Airflow's
Providers page and ``airflow providers hooks|triggers|links`` list raylift's; the benchmark report's extra link;
and the ``raylift_cluster`` connection type with its form fields, in the declarative form Airflow 3.2+ reads
(``conn-fields`` / ``ui-field-behaviour``, no hook import in the UI). Airflow 3.1 reads the same fields from the
hook's ``get_connection_form_widgets`` (:func:`form_widgets`). Nothing here imports more than the standard library:
Airflow reads it in every component at start.
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
    "allow_remote_code": {
        "label": "Allow a model's own code",
        "description": "whether runs on this cluster may set engine_args that run a model repo's code "
                       "(trust_remote_code, worker_extension_cls...); a run without a connection never may",
        "schema": {"type": "boolean", "default": False},
    },
    "redeploy": {
        "label": "Scheduled redeploys",
        "description": "raylift_redeploy re-runs this cluster's last good deploy on its schedule and on staged models",
        "schema": {"type": "boolean", "default": False},
    },
}


UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["host", "port", "schema", "login"],
    "relabeling": {"password": "Ray auth token"},
    "placeholders": {"password": "the cluster's RAY_AUTH_TOKEN (empty: no token auth)"},
}

RAY = "Ray Serve + vLLM"
AWS = "Amazon Web Services (ECS, EKS, CodeBuild, ECR, S3)"
KUBERAY = "KubeRay"
RAYLIFT = "raylift release pipeline"

INTEGRATIONS: list[dict[str, Any]] = [
    {"integration-name": RAYLIFT, "tags": ["software"]},
    {"integration-name": RAY, "tags": ["software"], "external-doc-url": "https://docs.ray.io/en/latest/serve/"},
    {"integration-name": AWS, "tags": ["aws"], "external-doc-url": "https://aws.amazon.com/"},
    {"integration-name": KUBERAY, "tags": ["software"], "external-doc-url": "https://docs.ray.io/en/latest/cluster/kubernetes/"},
]

# Module (under raylift.<kind>) -> its integration. tests/test_provider.py checks every module of each folder is here.
HOOKS: dict[str, str] = {
    "raylift_cluster": RAY, "ray_dashboard": RAY, "ray_drain": RAY, "ray_replica_logs": RAY,
    "autoscaling_group": AWS, "cloudwatch": AWS, "codebuild": AWS, "ec2_instance_types": AWS, "ecr": AWS,
    "ecs_service": AWS, "ecs_staging": AWS, "eks_nodegroup": AWS, "service_discovery": AWS,
    "kuberay": KUBERAY, "kuberay_workers": KUBERAY,
}
TRIGGERS: dict[str, str] = {
    "base": RAY, "dashboard": RAY, "drain": RAY, "polling": RAY, "ray_job": RAY, "serve": RAY,
    "codebuild": AWS, "ecs": AWS, "ecs_staging": AWS,
    "kube_job": KUBERAY, "rayservice": KUBERAY,
}
OPERATORS: dict[str, str] = {
    name: RAYLIFT
    for name in ("approval", "base", "baseline", "benchmark", "build", "cluster", "cold_start", "deploy", "gate",
                 "guard", "lease", "profile", "promote", "record", "redeploy", "smoke", "stage")
}
SENSORS: dict[str, str] = {"cluster": RAY}


def _by_integration(kind: str, modules: dict[str, str]) -> list[dict[str, Any]]:
    """``[{"integration-name": ..., "python-modules": [...]}]`` in the order of :data:`INTEGRATIONS`."""
    return [
        {"integration-name": integration["integration-name"],
         "python-modules": [f"raylift.{kind}.{m}" for m, i in modules.items() if i == integration["integration-name"]]}
        for integration in INTEGRATIONS
        if integration["integration-name"] in modules.values()
    ]


def form_widgets() -> dict[str, Any]:
    """:data:`CLUSTER_CONN_FIELDS` as the wtforms fields Airflow 3.1 reads from ``get_connection_form_widgets``.

    Imported only when Airflow asks (its UI mocks these modules where Flask-AppBuilder is not installed)."""
    from flask_appbuilder.fieldwidgets import BS3TextFieldWidget
    from flask_babel import lazy_gettext
    from wtforms import BooleanField, StringField

    widgets: dict[str, Any] = {}
    for name, spec in CLUSTER_CONN_FIELDS.items():
        label = lazy_gettext(spec["label"])
        if spec["schema"].get("type") == "boolean":
            widgets[name] = BooleanField(label, description=spec["description"])
        else:
            widgets[name] = StringField(label, widget=BS3TextFieldWidget(), description=spec["description"])
    return widgets


def get_provider_info() -> dict[str, Any]:
    from raylift import __version__

    return {
        "package-name": "raylift",
        "name": "raylift",
        "description": "Deploy LLMs on Ray Serve + vLLM (local, an existing Ray cluster, ECS, EKS/KubeRay), "
        "benchmark them and release them by canary or blue/green.",
        "versions": [__version__],
        "integrations": INTEGRATIONS,
        "operators": _by_integration("operators", OPERATORS),
        "sensors": _by_integration("sensors", SENSORS),
        "hooks": _by_integration("hooks", HOOKS),
        "triggers": _by_integration("triggers", TRIGGERS),
        "extra-links": ["raylift.operators.benchmark.BenchmarkReportLink"],
        "connection-types": [
            {
                "connection-type": "raylift_cluster",
                "hook-class-name": "raylift.hooks.raylift_cluster.RayliftClusterHook",
                "hook-name": "raylift cluster (Ray Serve + vLLM)",
                "conn-fields": CLUSTER_CONN_FIELDS,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            }
        ],
    }
