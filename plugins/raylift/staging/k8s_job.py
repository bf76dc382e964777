"""The Kubernetes Job that stages a model on EKS (seed 003's shape), and how to read how it ended. Pure: no client.

The write-up's Job had three containers (check Pod Identity, download to an ``emptyDir``, ``aws s3 sync``); raylift's
one container runs its own stager (``python -m raylift.aws.staging_job``), which checks the caller identity and the
bucket first, downloads into the ``emptyDir`` mounted as its cache and uploads only what S3 lacks. Kept from the
write-up: the ``emptyDir`` with a ``sizeLimit`` (the copy never touches the node's other disk budget, and is gone
with the pod), a service account that EKS Pod Identity binds to a role that may write the bucket (no key in the pod),
``activeDeadlineSeconds`` and a ``backoffLimit``. Unlike it, the pod is ``restartPolicy: Never`` with a small
``backoffLimit``: a retry is a new pod whose exit code stays readable, and the stager resumes from the manifest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

SCRATCH_VOLUME = "scratch"
CONTAINER = "stage"
APP_LABEL = "raylift-model-staging"
_NAME_BAD = re.compile(r"[^a-z0-9-]+")


def job_name(request_id: str) -> str:
    """A DNS-1123 label (63 characters; Job names become pod labels) from the request id."""
    name = _NAME_BAD.sub("-", f"raylift-stage-{request_id}".lower()).strip("-")
    return name[:63].rstrip("-")


def render_staging_job(
    *,
    name: str,
    namespace: str,
    image: str,
    command: list[str],
    service_account: str,
    scratch_size: str,
    cache_dir: str,
    deadline_s: int,
    backoff_limit: int = 1,
    hf_token_secret: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A ``batch/v1`` Job (plain dict) running ``command`` once, with the ``emptyDir`` at ``cache_dir``.

    The hub token, when given, comes from the Secret's ``token`` key (as the RayService's ``HF_TOKEN``): a
    reference, never a value, is all the manifest holds."""
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    if hf_token_secret:
        env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": hf_token_secret, "key": "token"}}})
    meta_labels = {"app.kubernetes.io/name": APP_LABEL, "app.kubernetes.io/managed-by": "raylift", **(labels or {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": meta_labels},
        "spec": {
            "backoffLimit": backoff_limit,
            "activeDeadlineSeconds": deadline_s,
            "ttlSecondsAfterFinished": 86400,  # kept a day for `kubectl logs job/<name>`, then cleaned up
            "template": {
                "metadata": {"labels": meta_labels},
                "spec": {
                    "serviceAccountName": service_account,
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": CONTAINER,
                        "image": image,
                        "command": list(command),
                        "env": env,
                        "volumeMounts": [{"name": SCRATCH_VOLUME, "mountPath": cache_dir}],
                        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
                    }],
                    "volumes": [{"name": SCRATCH_VOLUME, "emptyDir": {"sizeLimit": scratch_size}}],
                },
            },
        },
    }


@dataclass(frozen=True)
class JobOutcome:
    """Where a staging Job stands: ``done`` (Complete or Failed), ``succeeded``, and for a failure the reason and
    the last pod's exit code and termination reason (None/"" when no pod ran)."""

    done: bool
    succeeded: bool
    reason: str = ""
    message: str = ""
    exit_code: int | None = None
    pod_reason: str = ""

    def describe(self) -> str:
        parts = [p for p in (self.reason, self.message) if p]
        parts.append(f"exit code {self.exit_code}" if self.exit_code is not None else "no exit code")
        if self.pod_reason:
            parts.append(self.pod_reason)
        return ", ".join(parts)


def job_outcome(job: dict[str, Any] | None, pods: list[dict[str, Any]] | None = None) -> JobOutcome:
    """Read a Job's ``status.conditions`` (``Complete`` / ``Failed`` True) and, for the exit code, its pods'
    ``containerStatuses`` (the newest terminated ``stage`` container). A missing Job is a failed one."""
    if job is None:
        return JobOutcome(True, False, "NotFound", "the Job is gone (deleted, or cleaned up after its TTL)")
    conditions = {c.get("type"): c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in conditions:
        return JobOutcome(True, True, "Complete")
    if "Failed" not in conditions:
        return JobOutcome(False, False)
    failed = conditions["Failed"]
    exit_code, pod_reason, newest = None, "", ""
    for pod in pods or []:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            terminated = (status.get("state") or {}).get("terminated") or {}
            if status.get("name") == CONTAINER and terminated and str(terminated.get("finishedAt") or "") >= newest:
                newest = str(terminated.get("finishedAt") or "")
                exit_code = terminated.get("exitCode")
                pod_reason = str(terminated.get("reason") or "")
    return JobOutcome(True, False, str(failed.get("reason") or "Failed"), str(failed.get("message") or ""),
                      int(exit_code) if exit_code is not None else None, pod_reason)
