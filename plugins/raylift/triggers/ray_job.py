"""RayJobFinishedTrigger: wait on the Ray dashboard until a Ray job ends (Ray's Jobs REST API).

The pre-deploy checks on a Ray cluster raylift did not start (can its Python import the app's engine, does its
vLLM accept the engine args) run as Ray jobs of a few seconds. Their wait reads the dashboard as the deploy's does
(``RayDashboardTrigger``): the same retry rule (a dashboard restarting or answering 5xx is retried, a refused
token fails at once) and the same events, instead of a loop of its own that ended on the first failed poll.
"""

from __future__ import annotations

from typing import Any

from raylift.triggers.dashboard import RayDashboardTrigger

# ray.job_submission.JobStatus's terminal states (JobStatus.is_terminal)
JOB_TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


class RayJobFinishedTrigger(RayDashboardTrigger):
    """Poll ``GET /api/jobs/<submission_id>`` until the job is SUCCEEDED, FAILED or STOPPED.

    Emits ``success`` once the job has ended, whatever its outcome (``job_status``, Ray's ``message``: the caller
    judges the outcome and reads the logs), ``timeout`` with the last status, or ``failed`` when the dashboard
    refuses the token or the job id.

    :param dashboard_url: the dashboard, ``http://host:8265``.
    :param submission_id: the job's id, as ``POST /api/jobs/`` answered it.
    :param timeout_s: seconds until the ``timeout`` event.
    :param poll_interval_s: seconds between polls.
    """

    def __init__(self, dashboard_url: str, submission_id: str, timeout_s: float = 300.0,
                 poll_interval_s: float = 1.0, cluster_conn_id: str | None = None, local_token: bool = False) -> None:
        super().__init__(dashboard_url, timeout_s=timeout_s, poll_interval_s=poll_interval_s,
                         cluster_conn_id=cluster_conn_id, local_token=local_token)
        self.submission_id = submission_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"dashboard_url": self.dashboard_url, "submission_id": self.submission_id, "timeout_s": self.timeout_s,
             "poll_interval_s": self.poll_interval_s, **self.auth_kwargs()},
        )

    @property
    def subject(self) -> str:
        return f"Ray job {self.submission_id} at {self.dashboard_url}"

    def poll(self) -> dict[str, Any]:
        return self._dashboard().poll_job_status(self.submission_id)

    async def apoll(self) -> dict[str, Any]:
        return await self._dashboard().ajob_status(self.submission_id)

    def evaluate(self, observed: dict[str, Any]) -> dict[str, Any] | None:
        status = str(observed.get("status"))
        if status in JOB_TERMINAL:
            return {"status": "success", "job_status": status, "job_message": str(observed.get("message") or "")}
        return None

    def progress(self, observed: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        status = str(observed.get("status"))
        return f"job {status}", {"job_status": status}
