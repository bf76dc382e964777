"""raylift's ApplicationStatus is Ray's: same names, same values (checked in the runtime env, where Serve imports)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from raylift.serve.status import FAILED_APP_STATES, ApplicationStatus

RUNTIME = Path(__file__).resolve().parents[1] / ".cache/venvs/runtime/bin/python"


@pytest.mark.skipif(not RUNTIME.exists(), reason="the runtime env (ray[serve]) is not built")
def test_mirrors_rays_own_enum() -> None:
    code = "import json; from ray.serve.schema import ApplicationStatus as A; print(json.dumps({m.name: m.value for m in A}))"
    out = subprocess.run([str(RUNTIME), "-c", code], capture_output=True, text=True, timeout=300, check=True)
    rays = json.loads(out.stdout.strip().splitlines()[-1])
    assert {m.name: m.value for m in ApplicationStatus} == rays


def test_compares_equal_to_the_reported_strings() -> None:
    assert ApplicationStatus.RUNNING == "RUNNING"
    assert "DEPLOY_FAILED" in FAILED_APP_STATES and "UNHEALTHY" in FAILED_APP_STATES
    assert ApplicationStatus.DEPLOYING not in FAILED_APP_STATES
