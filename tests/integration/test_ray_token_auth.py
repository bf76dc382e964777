"""Ray's token auth against a real local Ray head (RAY_AUTH_MODE=token, ports 32xxx on 127.0.0.1): raylift's deploy
path (the dashboard hook's Serve REST PUT, then the deploy trigger's wait) succeeds with the cluster's token, taken
from the cluster's raylift_cluster connection (an AIRFLOW_CONN_* connection, as Airflow reads it), and fails fast,
naming what to set, without it or with a wrong one. The token never appears in an error."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from raylift.hooks.ray_dashboard import RayAuthError, RayDashboardHook
from raylift.triggers.serve import ServeApplicationsTrigger

ROOT = Path(__file__).resolve().parents[2]
RAY = ROOT / ".cache/venvs/runtime/bin/ray"
# below the kernel's ephemeral range (32768-60999): a port in it can be any client's at that moment (seen: the Serve
# proxy's 33800 taken while the unit tests ran beside this module)
GCS, DASHBOARD, SERVE = 32379, 32265, 32700
PORTS = ["--port=32379", "--dashboard-port=32265", "--ray-client-server-port=32001", "--node-manager-port=32370",
         "--object-manager-port=32371", "--dashboard-agent-listen-port=32366", "--dashboard-agent-grpc-port=32367",
         "--runtime-env-agent-port=32368", "--metrics-export-port=32369", "--min-worker-port=32400",
         "--max-worker-port=32499"]
URL = f"http://127.0.0.1:{DASHBOARD}"
APP = '''from ray import serve


@serve.deployment
class Hello:
    async def __call__(self, request) -> str:
        return "hello"


app = Hello.bind()
'''


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head with token auth; yields the token."""
    if not RAY.exists():
        pytest.skip("runtime venv missing (make setup)")
    token = secrets.token_hex(16)
    home = tmp_path_factory.mktemp("ray-auth")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    # a stand-in of a user's cluster whose stop is not under test: Ray 2.60 drains a node for 30 s on SIGTERM first
    # (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S; the stop signals its whole group, so there is nothing to drain)
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0"
    env |= {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token, "RAY_USAGE_STATS_ENABLED": "0",
            "PATH": f"{RAY.parent}:{env.get('PATH', '')}"}
    temp_dir = f"/tmp/raylift-auth-{os.getpid()}"

    def start() -> subprocess.Popen[bytes]:
        with (home / "head.log").open("ab") as log:
            return subprocess.Popen(
                [str(RAY), "start", "--head", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1",
                 "--dashboard-host=127.0.0.1", "--include-dashboard=true", "--num-cpus=2", f"--temp-dir={temp_dir}",
                 *PORTS],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=home, start_new_session=True,
            )

    proc = start()
    try:
        deadline, restarted = time.monotonic() + 180, False
        while True:
            try:  # /api/version needs the token (401 without it): up and enforcing auth
                if httpx.get(f"{URL}/api/version", timeout=2, headers={"Authorization": f"Bearer {token}"}).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                log_text = (home / "head.log").read_text()
                # Ray gives its raylet a fixed 30 s to register (node.py); on a box loaded by the rest of the
                # suite it can miss that once. Start the head once more; anything else fails the test.
                assert not restarted and "timed out during startup" in log_text, f"ray head exited: {log_text[-2000:]}"
                with contextlib.suppress(ProcessLookupError):  # what the failed start left of its group
                    os.killpg(proc.pid, signal.SIGKILL)
                restarted, proc = True, start()
            assert time.monotonic() < deadline, "ray head did not come up in 180 s"
            time.sleep(1)
        assert httpx.get(f"{URL}/api/version", timeout=5).status_code == 401  # token auth is on
        yield token
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(5)  # `ray start --block` rarely exits on SIGTERM in time; the SIGKILL below ends it
        except subprocess.TimeoutExpired:
            pass
        try:  # Ray's own processes share the group: none may outlive the test
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        shutil.rmtree(temp_dir, ignore_errors=True)  # Ray's session folders: nothing of this head is left behind


def _config(tmp_path: Path) -> dict:
    package = tmp_path / "hello.zip"
    with zipfile.ZipFile(package, "w") as archive:
        archive.writestr("hello/hello.py", APP)  # one top-level folder, as Ray wants of a working_dir zip
    return {
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": SERVE},
        "applications": [{"name": "hello", "import_path": "hello:app", "route_prefix": "/hello",
                          "runtime_env": {"working_dir": f"file://{package}"}}],
    }


@pytest.mark.timeout(600)
def test_deploy_with_the_token_and_a_clear_error_without(
    token_cluster: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    config = _config(tmp_path)

    with pytest.raises(RayAuthError, match="requires a token .*RAY_AUTH_MODE=token.* raylift_cluster connection") as missing:
        RayDashboardHook(URL).put_serve_config(config)
    with pytest.raises(RayAuthError, match="rejected raylift's token") as wrong:
        RayDashboardHook(URL, auth_token="not-the-token").put_serve_config(config)
    assert token_cluster not in str(missing.value) + str(wrong.value)

    # the token as the password of the cluster's connection; the trigger looks it up again where it runs
    monkeypatch.setenv("AIRFLOW_CONN_AUTHED", json.dumps({
        "conn_type": "raylift_cluster", "password": token_cluster,
        "extra": {"kind": "ray", "dashboard_url": URL, "serve_url": f"http://127.0.0.1:{SERVE}"},
    }))
    hook = RayDashboardHook(conn_id="authed")
    hook.put_serve_config(config)
    trigger = ServeApplicationsTrigger(URL, ["hello"], submitted_at=0.0, poll_interval_s=1.0, timeout_s=300,
                                       cluster_conn_id="authed")

    async def first_event() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("no event")

    event = asyncio.run(first_event())
    assert event["status"] == "success", event
    assert httpx.get(f"http://127.0.0.1:{SERVE}/hello", timeout=10).text == "hello"
    assert hook.serve_applications()["applications"]["hello"]["status"] == "RUNNING"
