"""Serve application states: the one place raylift spells them.

Ray has one enum for them, ``ray.serve.schema.ApplicationStatus``, but importing it loads ``ray.serve`` (Ray's
client, pydantic models and gRPC modules), which the trigger modules and ``raylift.kuberay.status`` must not do:
the triggerer and every DAG parse import them (``tests/triggers/test_rayservice.py`` checks no ``ray`` is
loaded), and before grpcio-reflection joined the control lock it did not even import there. So this mirrors
Ray's names and values; ``tests/test_serve_status.py`` checks it against Ray's own enum in the runtime
environment. The dashboard's ``GET /api/serve/applications/`` and KubeRay's ``applicationStatuses`` both
report these strings.
"""

from __future__ import annotations

from enum import StrEnum


class ApplicationStatus(StrEnum):
    """Mirror of ``ray.serve.schema.ApplicationStatus`` (a ``str`` there too: compares equal to the reported value)."""

    NOT_STARTED = "NOT_STARTED"
    DEPLOYING = "DEPLOYING"
    DEPLOY_FAILED = "DEPLOY_FAILED"
    RUNNING = "RUNNING"
    UNHEALTHY = "UNHEALTHY"
    DELETING = "DELETING"


# Definitive failures: a wait fails at once on these instead of waiting for its deadline.
FAILED_APP_STATES: frozenset[str] = frozenset({ApplicationStatus.DEPLOY_FAILED, ApplicationStatus.UNHEALTHY})
