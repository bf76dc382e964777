"""A Serve config shaped like the one the local target deploys (shared by the KubeRay tests)."""

from __future__ import annotations

from typing import Any


def serve_config(app: str = "llm", model: str = "tiny-llm") -> dict[str, Any]:
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": "127.0.0.1", "port": 8000, "request_timeout_s": 120},
        "applications": [
            {
                "name": app,
                "route_prefix": "/",
                "import_path": "serve_apps.llm:build_app",
                "runtime_env": {
                    "working_dir": "s3://raylift-models/artifacts/abc123.zip",
                    "env_vars": {"VLLM_LOGGING_LEVEL": "INFO"},
                },
                "args": {"model_id": model, "model_source": "/mnt/models/tiny-llm"},
                "deployments": [
                    {"name": "LLMServer", "autoscaling_config": {"min_replicas": 1, "max_replicas": 2}}
                ],
            }
        ],
    }
