"""The engine-args check loads the model's (user-supplied) code in a subprocess: it gets a minimal environment, no
credential of the worker's. The judge: the real subprocess path, with a stand-in runtime Python that prints the
environment it was given."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest

from raylift.config import LocalSettings
from raylift.targets.local import LocalTarget

SECRET = "fake-secret-" + "b7c1d9e4"


def record_child_env(monkeypatch: pytest.MonkeyPatch, where: str) -> list[dict[str, str]]:
    """The environments the stand-in runtime Python printed, one per real ``subprocess.run`` at ``where``."""
    import subprocess

    seen: list[dict[str, str]] = []
    real_run = subprocess.run

    def recording_run(*args, **kwargs):  # type: ignore[no-untyped-def]
        proc = real_run(*args, **kwargs)
        seen.append(json.loads(proc.stdout.splitlines()[-1])["env"])
        return proc

    monkeypatch.setattr(where, recording_run)
    return seen


def test_the_check_subprocess_gets_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "python"
    runtime.write_text(
        f"#!{sys.executable}\n"
        "import json, os\n"
        "print(json.dumps({'ok': True, 'env': dict(os.environ)}))\n"
    )
    runtime.chmod(runtime.stat().st_mode | stat.S_IEXEC)
    for name in ("RAY_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN",
                 "AIRFLOW_CONN_PROD", "AIRFLOW__API_AUTH__JWT_SECRET", "HF_TOKEN", "MY_SERVICE_PASSWORD",
                 "GITHUB_TOKEN", "SOME_SECRET"):
        monkeypatch.setenv(name, SECRET)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    seen = record_child_env(monkeypatch, "raylift.targets.local.subprocess.run")
    settings = LocalSettings(home=tmp_path / "home", runtime_python=runtime, check_cache=tmp_path / "checks")
    LocalTarget(settings=settings).validate_engine_args(str(tmp_path / "model"), {"max_model_len": 64})
    (env,) = seen
    assert SECRET not in json.dumps(env), sorted(k for k, v in env.items() if v == SECRET)
    assert env["PATH"] == os.environ["PATH"] and env["HF_HOME"] == str(tmp_path / "hf")
    assert env["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_the_serve_schema_check_subprocess_gets_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's Serve schema check runs the runtime env's Python on the config: the same scrubbed environment."""
    runtime = tmp_path / "python"
    runtime.write_text(
        f"#!{sys.executable}\n"
        "import json, os\n"
        "print(json.dumps({'ok': True, 'warnings': [], 'env': dict(os.environ)}))\n"
    )
    runtime.chmod(runtime.stat().st_mode | stat.S_IEXEC)
    for name in ("RAY_AUTH_TOKEN", "AWS_SECRET_ACCESS_KEY", "AIRFLOW_CONN_PROD", "HF_TOKEN", "SOME_SECRET"):
        monkeypatch.setenv(name, SECRET)
    seen = record_child_env(monkeypatch, "raylift.serve.validation.subprocess.run")
    settings = LocalSettings(home=tmp_path / "home", runtime_python=runtime, check_cache=tmp_path / "checks")
    assert LocalTarget(settings=settings).check_serve_schema({"applications": []}, "app") == []
    (env,) = seen
    assert SECRET not in json.dumps(env), sorted(k for k, v in env.items() if v == SECRET)
    assert env["PATH"] == os.environ["PATH"]
