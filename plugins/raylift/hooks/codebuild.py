"""CodeBuild: start an image build with env overrides, and read where a build stands.

CodeBuild has no boto waiters (``client.waiter_names`` is empty), so "the build ended" is raylift's
custom waiter ``build_complete`` in ``raylift/waiters/codebuild.json``: the in-process wait here and the
deferred one (``CodeBuildBuildTrigger``) both drive it, and both explain an unsuccessful end with
:func:`build_wait_message` from the last ``BatchGetBuilds`` reply the waiter judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

from raylift.errors import BuildError

WAITERS = Path(__file__).resolve().parents[1] / "waiters"
BUILD_WAITER = "build_complete"


class BuildStatus:
    """CodeBuild ``buildStatus`` values."""

    IN_PROGRESS = "IN_PROGRESS"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    FAULT = "FAULT"
    TIMED_OUT = "TIMED_OUT"
    STOPPED = "STOPPED"

    FAILURES = frozenset({FAILED, FAULT, TIMED_OUT, STOPPED})
    TERMINAL = FAILURES | {SUCCEEDED}


@dataclass(frozen=True)
class BuildOutcome:
    """Where a build stands, and on failure which phase broke, why, and where its logs are."""

    build_id: str
    status: str
    current_phase: str
    failed_phase: str | None = None
    reason: str | None = None
    logs_url: str | None = None

    @property
    def done(self) -> bool:
        return self.status in BuildStatus.TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.status == BuildStatus.SUCCEEDED

    def failure_message(self) -> str:
        phase = self.failed_phase or self.current_phase
        return (
            f"CodeBuild build {self.build_id} ended {self.status} in phase {phase}: "
            f"{self.reason or 'no reason given'}. Logs: {self.logs_url or 'not available'}"
        )


def logs_deep_link(build: dict[str, Any], region: str | None) -> str | None:
    """The console link to the build's CloudWatch logs (CodeBuild's own, else built from group/stream)."""
    logs = build.get("logs") or {}
    if logs.get("deepLink"):
        return logs["deepLink"]
    group, stream = logs.get("groupName"), logs.get("streamName")
    if not (group and stream and region):
        return None

    def enc(value: str) -> str:  # the console's "$252F"-style double encoding
        return quote(quote(value, safe=""), safe="").replace("%", "$")

    return (
        f"https://console.aws.amazon.com/cloudwatch/home?region={region}"
        f"#logsV2:log-groups/log-group/{enc(group)}/log-events/{enc(stream)}"
    )


def build_outcome(build: dict[str, Any], region: str | None = None) -> BuildOutcome:
    """Parse one ``BatchGetBuilds`` build into a :class:`BuildOutcome`."""
    status = build.get("buildStatus", BuildStatus.IN_PROGRESS)
    failed_phase = reason = None
    if status in BuildStatus.FAILURES:
        for phase in build.get("phases") or []:
            if phase.get("phaseStatus") in BuildStatus.FAILURES:
                failed_phase = phase.get("phaseType")
                contexts = [
                    f"{c.get('statusCode', '')}: {c.get('message', '')}".strip(": ")
                    for c in phase.get("contexts") or []
                    if c.get("message") or c.get("statusCode")
                ]
                reason = "; ".join(contexts) or None
                break
    return BuildOutcome(
        build_id=build.get("id", "?"),
        status=status,
        current_phase=build.get("currentPhase", "?"),
        failed_phase=failed_phase,
        reason=reason,
        logs_url=logs_deep_link(build, region) if status != BuildStatus.IN_PROGRESS else None,
    )


def build_wait_message(reply: dict[str, Any], build_id: str, region: str | None, *, waited_s: float | None = None) -> str:
    """Why a wait on ``build_id`` ended without success, read from the last ``BatchGetBuilds`` reply.

    :param reply: the last reply the waiter judged (a parsed error reply has an ``Error`` key).
    :param waited_s: set when the wait ran out of attempts: the message then says how long it waited.
    """
    builds = reply.get("builds") or []
    if waited_s is not None:
        phase = builds[0].get("currentPhase", "?") if builds else "?"
        return f"CodeBuild build {build_id} still in phase {phase} after {waited_s:.0f}s."
    if "Error" in reply:
        error = reply["Error"]
        return f"BatchGetBuilds for {build_id} failed: {error.get('Code', '?')}: {error.get('Message', '')}"
    if not builds:
        return f"CodeBuild has no build {build_id!r} (not found: {reply.get('buildsNotFound')})."
    return build_outcome(builds[0], region).failure_message()


class CodeBuildHook(AwsBaseHook):
    """Thin CodeBuild client wrapper (``AwsBaseHook(client_type="codebuild")``) with raylift's waiters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["client_type"] = "codebuild"
        super().__init__(*args, **kwargs)

    @property
    def waiter_path(self) -> Path:
        """raylift's ``waiters/codebuild.json``: the provider's own lookup only searches its package."""
        return WAITERS / f"{self.client_type}.json"

    def start_image_build(
        self,
        project: str,
        *,
        image_repo_uri: str,
        image_tag: str,
        dockerfile: str,
        build_context: str = ".",
        source_version: str | None = None,
        source_location: str | None = None,
        platform: str | None = None,
    ) -> str:
        """StartBuild with the image coordinates as env overrides; returns the build id.

        :param source_location: ``<bucket>/<key>`` of the build-context zip raylift uploaded for this build.
        :param platform: ``docker build --platform`` (e.g. ``linux/arm64``; buildspec's DOCKER_PLATFORM).
        """
        env = {
            "IMAGE_REPO_URI": image_repo_uri,
            "IMAGE_TAG": image_tag,
            "DOCKERFILE": dockerfile,
            "BUILD_CONTEXT": build_context,
        }
        if platform:
            env["DOCKER_PLATFORM"] = platform
        kwargs: dict[str, Any] = {
            "projectName": project,
            "environmentVariablesOverride": [
                {"name": k, "value": v, "type": "PLAINTEXT"} for k, v in env.items()
            ],
        }
        if source_version:
            kwargs["sourceVersion"] = source_version
        if source_location:
            kwargs["sourceTypeOverride"] = "S3"
            kwargs["sourceLocationOverride"] = source_location
        from botocore.exceptions import ClientError

        try:
            build = self.conn.start_build(**kwargs)["build"]
        except ClientError as exc:
            raise BuildError(
                f"CodeBuild refused to start project {project!r}: {exc.response['Error'].get('Message', exc)}. "
                "Check the project name (terraform output) and the caller's codebuild:StartBuild permission."
            ) from None
        self.log.info("Started CodeBuild build %s for %s:%s", build["id"], image_repo_uri, image_tag)
        return build["id"]

    def wait_for_build(self, build_id: str, *, waiter_delay: float = 15, waiter_max_attempts: int = 240) -> None:
        """Block (in-process) on the ``build_complete`` waiter; the deferrable path is ``CodeBuildBuildTrigger``.

        A throttled poll is one more attempt (the waiter's retry acceptors), not the end of the wait.
        BuildError with the failed phase, reason and logs link when the build fails, or with its phase
        when the attempts run out.
        """
        from botocore.exceptions import WaiterError

        try:
            self.get_waiter(BUILD_WAITER).wait(
                ids=[build_id], WaiterConfig={"Delay": waiter_delay, "MaxAttempts": waiter_max_attempts}
            )
        except WaiterError as exc:
            timed_out = str(exc.kwargs.get("reason", "")).startswith("Max attempts exceeded")
            raise BuildError(
                build_wait_message(
                    exc.last_response or {},
                    build_id,
                    self.conn_region_name,
                    waited_s=waiter_delay * waiter_max_attempts if timed_out else None,
                )
            ) from None
        self.log.info("CodeBuild build %s succeeded", build_id)
