"""Provider metadata: lets Airflow discover raylift through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "raylift",
        "name": "raylift",
        "description": "Deploy LLMs on Ray Serve + vLLM (local, ECS, EKS/KubeRay) and benchmark them.",
        "versions": ["0.1.0"],
    }
