"""What only one app needs reaches the local runtime on that app's first deploy, not in `make demo`'s setup."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from raylift.config import repo_root
from raylift.errors import ClusterError
from raylift.targets.local import LocalTarget


def test_a_module_the_runtime_has_costs_one_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYLIFT_RUNTIME_PYTHON", sys.executable)
    started = time.monotonic()
    LocalTarget().ensure_app_runtime("json", "llamacpp")  # present: no setup run, no error
    assert time.monotonic() - started < 30


def test_another_runtime_without_the_module_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """raylift installs only into its own runtime env; a runtime named by RAYLIFT_RUNTIME_PYTHON is the user's."""
    monkeypatch.setenv("RAYLIFT_RUNTIME_PYTHON", sys.executable)
    with pytest.raises(ClusterError) as err:
        LocalTarget().ensure_app_runtime("no_such_module_for_raylift", "llamacpp")
    message = str(err.value)
    assert "no_such_module_for_raylift" in message and "RAYLIFT_RUNTIME_PYTHON" in message
    assert "Nothing was deployed" in message


@pytest.mark.skipif(not Path(repo_root() / ".cache/venvs/runtime/bin/python").exists(), reason="no runtime env")
def test_the_runtime_imports_llama_cpp_after_the_tests_setup() -> None:
    """tools/test.sh runs `setup.sh llamacpp`: the llama.cpp app's tests then find the module."""
    runtime = repo_root() / ".cache/venvs/runtime/bin/python"
    probe = subprocess.run([str(runtime), "-c", "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('llama_cpp') is None)"], timeout=60)
    assert probe.returncode == 0
