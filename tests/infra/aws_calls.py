"""A pytest plugin that records every AWS API call raylift's code makes, through botocore's own event hooks.

Loaded with ``-p tests.infra.aws_calls`` into a pytest run of the moto-backed tests, with
``RAYLIFT_AWS_CALL_LOG`` naming a JSON-lines file. Each botocore session (boto3's, the Amazon provider's,
aiobotocore's) gets a ``before-call`` handler; a call is raylift's when a frame of ``plugins/raylift/`` (or
``serve_apps/``) is on the stack, or, for calls made from worker threads (s3transfer's multipart parts), when
raylift's code created the session. Calls the tests themselves make (moto set-up) are not raylift's and are
left out. The IAM test maps the records to IAM actions and checks them against the terraform policies.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# where the calling code lives -> the principal that makes the call in a deployment
ORIGINS = {str(ROOT / "plugins" / "raylift") + os.sep: "airflow", str(ROOT / "serve_apps") + os.sep: "ray"}
ENV = "RAYLIFT_AWS_CALL_LOG"
_lock = threading.Lock()


def _origin(frame: Any) -> tuple[str, str] | None:
    """(principal, "file:line") of the innermost raylift frame on the stack, if any."""
    while frame is not None:
        filename = frame.f_code.co_filename
        for prefix, principal in ORIGINS.items():
            if filename.startswith(prefix):
                return principal, f"{os.path.relpath(filename, ROOT)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def _record(path: str, session_origin: tuple[str, str] | None, model: Any, params: dict[str, Any]) -> None:
    origin = _origin(sys._getframe(2)) or session_origin
    if origin is None:
        return  # the test's own set-up call (moto resources), not raylift's
    entry = {
        "service": model.service_model.service_name,
        "operation": model.name,
        "principal": origin[0],
        "caller": origin[1],
        "bucket": params.get("Bucket") if isinstance(params, dict) else None,
        "versioned": bool(isinstance(params, dict) and params.get("VersionId")),
        "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
    }
    with _lock, open(path, "a") as handle:
        handle.write(json.dumps(entry) + "\n")


def install(path: str) -> None:
    """Register the recorder on every botocore session created from now on."""
    import botocore.session

    original = botocore.session.Session.__init__
    if getattr(original, "_raylift_recording", False):
        return

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        session_origin = _origin(sys._getframe(1))

        def before_call(model: Any, params: dict[str, Any], **_: Any) -> None:
            _record(path, session_origin, model, params)

        self.register("before-call", before_call)

    __init__._raylift_recording = True  # type: ignore[attr-defined]
    botocore.session.Session.__init__ = __init__  # type: ignore[method-assign]


def pytest_configure(config: Any) -> None:
    path = os.environ.get(ENV)
    if path:
        install(path)


def load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- recording inside the suite's own run ----------------------------------------------------------------
# The IAM test used to run the moto-backed tests a second time in a child pytest (4.5 min of CPU beside the
# heavy part). When the same pytest run collects all of them, unfiltered, the recorder is installed in that
# run instead and the IAM tests are moved after them; any other selection falls back to the child run.
RECORDED_TESTS = ("tests/aws", "tests/hooks", "tests/serve_apps", "tests/targets", "tests/triggers")
IAM_TESTS = "tests/infra/test_iam_from_calls.py"
_SESSION_LOG: Path | None = None  # set by plan_in_session: the log file of this run's recording


def _needs_record(item: Any) -> bool:
    return item.nodeid.startswith(IAM_TESTS + "::") and "calls" in getattr(item, "fixturenames", ())


def plan_in_session(config: Any, items: list[Any]) -> None:
    """Record this run's AWS calls and run the IAM tests last, if this run has every recorded test and an
    IAM test that needs the record (else the IAM test runs its own child pytest: ``session_record`` is None)."""
    global _SESSION_LOG
    needing = [item for item in items if _needs_record(item)]
    filtered = bool(config.getoption("keyword", "") or config.getoption("markexpr", ""))
    present = {prefix for prefix in RECORDED_TESTS for item in items if item.nodeid.startswith(prefix + "/")}
    if not needing or filtered or present != set(RECORDED_TESTS) or os.environ.get(ENV):
        return
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="raylift-aws-calls-"))
    _SESSION_LOG = folder / "calls.jsonl"
    _SESSION_LOG.touch()
    install(str(_SESSION_LOG))
    items[:] = [item for item in items if not _needs_record(item)] + needing


def session_record() -> list[dict[str, Any]] | None:
    """The calls the recorded tests made in this run (None when this run does not record)."""
    if _SESSION_LOG is None:
        return None
    return [c for c in load(_SESSION_LOG) if c["test"].startswith(tuple(p + "/" for p in RECORDED_TESTS))]
