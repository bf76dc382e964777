"""raylift's exception types: specific, picklable, and each message says what is wrong and what to do."""

from __future__ import annotations


class RayliftError(Exception):
    """Base class for every error raylift raises on purpose."""


class RayliftValueError(RayliftError, ValueError):
    """A user-supplied value (DAG Param, config field) is invalid."""


class UnknownTargetError(RayliftValueError):
    """The ``target`` Param names no registered deployment target."""


class ModelSourceError(RayliftError):
    """The model source cannot be read, or does not hold a loadable model."""


class StagingError(RayliftError):
    """Copying the model into the model store failed."""


class UnsafePathError(RayliftValueError):
    """An archive member or object key would escape its destination (path traversal)."""


class CredentialsError(RayliftError):
    """No usable credentials for a cloud API (Airflow connection or AWS default chain)."""


class BuildError(RayliftError):
    """Building the runtime artifact / image failed."""


class ClusterError(RayliftError):
    """The Ray cluster could not be started, resized or reached."""


class ClusterNotReadyError(ClusterError):
    """The Ray cluster did not reach the expected nodes/resources in time."""


class ClusterCapacityError(ClusterError):
    """A second cluster (a blue/green release's green) does not fit beside the running one; nothing was started."""


class DeployError(RayliftError):
    """A Serve deploy was refused or an application went DEPLOY_FAILED."""


class SmokeTestError(RayliftError):
    """The deployed endpoint did not answer the smoke test correctly."""


class GateError(RayliftError):
    """A benchmark result broke an SLO or regressed against the last good run."""


class EndpointNotAllowedError(RayliftValueError):
    """A benchmark was pointed at a non-loopback endpoint without ``allow_remote=True``."""


class BenchmarkError(RayliftError):
    """A benchmark run could not produce a result (bad profile, no successful request, unknown price)."""


class ManifestValidationError(RayliftValueError):
    """A rendered Kubernetes manifest does not satisfy its CRD schema; ``path`` names the failing field."""

    def __init__(self, message: str, path: str = "") -> None:
        super().__init__(message)
        self.path = path

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        return (type(self), (self.args[0], self.path))


class KubernetesApiError(RayliftError):
    """The Kubernetes API refused a request (the message carries its status code and reason).

    :param status: the HTTP status, so a wait can tell a passing failure (5xx, 429) from a definitive one.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[type, tuple[str, int | None]]:
        return (type(self), (self.args[0], self.status))


class RedeployError(RayliftError):
    """There is no last good deploy to redeploy, or its record cannot be replayed."""


class ServeFitError(RayliftValueError):
    """A Serve config is invalid or cannot fit the cluster (the message names the numbers); nothing was applied."""
