"""The README's Compose steps, run without Docker, to a served ``/v1/models``.

Each container is replayed from the project's own files (``tests/fixtures/compose_layout.py``):

* Airflow (``airflow-scheduler``, where the README's trigger runs): the Airflow image's raylift install replayed
  into a fresh venv, non-editable (its COPY steps, then its ``pip install ./``, a wheel); the service's
  environment and mounts mapped onto one folder (``fs``); the metadata DB made by ``airflow-init``'s own command.
* Ray (``ray-head``): started with the service's own resolved command line (``ray start --head ...``), the
  runtime venv standing in for the ray-vllm-cpu image (its ``ray`` first on PATH; same lock), with the service's
  and image's environment, the image user's empty home, and the named volume at the same folder as Airflow's.
  Compose's healthcheck command says when it is up. ``ray-worker`` is not started: the README's trigger asks for
  no worker (``workers`` 0) and the head's two CPUs hold the tiny model's replica.
* The README's model step (``docker compose run ... ray-head python /tmp/tools/make_tiny_model.py
  /opt/raylift/var/models/tiny-llama``) in the ray-head service's layout, its ``-v`` bind included.
* The README's trigger ``--conf`` through ``raylift_deploy`` in the Airflow layout: ``airflow dags test`` with
  that conf runs the DAG's tasks in one process (a scheduler, triggerer and api-server would only add start-up).

The network substitutions (service names on 127.0.0.1, every port the stack uses on a free local port, the same
one wherever Compose uses it: the ray-head command line, the Airflow env, the trigger's URLs and the published
ports) are listed in ``HostNetwork``'s docstrings. Container paths in the conf and the commands become their
folders under ``fs``.

Oracles: the ``openai`` SDK (runtime venv) lists the served model at the published Serve port, plain HTTP does
what the README's ``curl`` does, and Ray Serve's own ``serve status`` shows the app RUNNING. The head runs in its
own process group and is stopped at the end as ``docker compose down`` stops a container (SIGTERM, then SIGKILL
after Compose's 10 s grace period); no process of it may be left.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import yaml

from tests.fixtures.compose_layout import (
    AIRFLOW_SERVICE,
    IMAGE_HOMES,
    RAY_SERVICE,
    ROOT,
    RUNTIME_BIN,
    HostNetwork,
    compose_layout,
    image_env,
    install_airflow_image,
    on_fs,
    readme_compose_model_step,
    readme_compose_trigger,
    resolved_services,
)

pytestmark = pytest.mark.integration

APP = "llm"  # raylift_deploy's app_name default: the README's trigger does not set it
DASHBOARD_PORT, SERVE_PORT = 8265, 8000  # ray-head's published ports (docker-compose.yaml; the README's curl)
DAG_TIMEOUT_S = 1200
HEAD_START_TIMEOUT_S = 180
STOP_GRACE_S = 10  # Compose's default stop_grace_period (docker-compose.yaml's ray-head sets none)


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else f"({path} not written)"


def _command(words: list[str], network: HostNetwork, fs: Path) -> list[str]:
    """A service's command on this machine: the image's ``ray``/``python`` as the runtime venv's, container
    paths under ``fs``, the stack's addresses as their local stand-ins."""
    out = [str(RUNTIME_BIN / words[0]) if words[0] in ("ray", "python") else words[0]]
    return out + [on_fs(network.addresses(w), fs) for w in words[1:]]


def _on_host(value: Any, network: HostNetwork, fs: Path) -> Any:
    """The trigger's conf on this machine: addresses mapped, container paths under ``fs``."""
    if isinstance(value, dict):
        return {k: _on_host(v, network, fs) for k, v in value.items()}
    if isinstance(value, str):
        return on_fs(network.addresses(value), fs)
    return value


def _alive(procs: set[psutil.Process]) -> set[psutil.Process]:
    """Those of ``procs`` still running (not zombies; a reused pid is another process: psutil compares start times)."""
    live = set()
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                live.add(proc)
        except psutil.Error:
            continue
    return live


def _head_processes(head: psutil.Process, temp_dir: Path) -> set[psutil.Process]:
    """The head and everything it started: its descendants (Ray's workers and job entrypoints run in process
    groups and sessions of their own) and any process naming its temp dir (Ray's session)."""
    found = {head}
    with contextlib.suppress(psutil.NoSuchProcess):
        found.update(head.children(recursive=True))
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(temp_dir) in arg for arg in proc.info["cmdline"] or ()):
            found.add(proc)
    return _alive(found)


@contextmanager
def ray_head(command: list[str], env: dict[str, str], cwd: Path, temp_dir: Path,
             log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """The ray-head service's command, in its own process group. At the end, as `docker compose down` stops a
    container: SIGTERM to the command (`ray start --block` then stops its Ray processes), after the grace period
    SIGKILL to whatever of the head is left (its group, its descendants: a container's are all in its PID
    namespace); then none may be running. (SIGTERM to the whole group would stop the GCS under `ray start`,
    whose drain then waits 30 s for it.)"""
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True)
    head = psutil.Process(proc.pid)
    try:
        yield proc
    finally:
        family = _head_processes(head, temp_dir)  # before stopping: orphans lose their parent
        proc.terminate()
        deadline = time.monotonic() + STOP_GRACE_S
        while _alive(family) and time.monotonic() < deadline:
            time.sleep(0.5)
        stubborn = _alive(family | _head_processes(head, temp_dir))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        for left in stubborn:
            with contextlib.suppress(psutil.NoSuchProcess):  # it may end between the two calls
                left.kill()
        proc.wait(10)
        psutil.wait_procs(list(family), timeout=10)
        shutil.rmtree(temp_dir, ignore_errors=True)
        # checked once the head is down, in `finally`: a failed test must not leave its cluster either
        assert not _alive(family | _head_processes(head, temp_dir)), "ray-head processes outlived SIGKILL"
        print(f"ray-head stopped: {len(family)} processes, {len(stubborn)} still running after the grace period")


def wait_healthy(head: subprocess.Popen[bytes], health: list[str], env: dict[str, str], log: Path) -> None:
    """Until Compose's healthcheck command for the service passes (what `docker compose ps` shows as healthy)."""
    deadline = time.monotonic() + HEAD_START_TIMEOUT_S
    while subprocess.run(health, env=env, capture_output=True, timeout=60).returncode != 0:
        assert head.poll() is None, f"the ray-head command exited ({head.returncode}): {_tail(log)}"
        assert time.monotonic() < deadline, f"ray-head not healthy in {HEAD_START_TIMEOUT_S} s: {_tail(log)}"
        time.sleep(2)


@pytest.mark.timeout(DAG_TIMEOUT_S + 600)
def test_the_readme_compose_trigger_serves_the_model(tmp_path: Path) -> None:
    services = resolved_services()
    network = HostNetwork.for_stack(services)
    fs = tmp_path / "fs"

    # ray-head: the service's environment and mounts, the image's ENV, WORKDIR and user's (empty) home
    ray = services[RAY_SERVICE]
    ray_image = ray["build"]["dockerfile"]
    ray_home = fs / IMAGE_HOMES[ray_image].lstrip("/")
    ray_home.mkdir(parents=True)
    ray_env = {"PATH": f"{RUNTIME_BIN}:/usr/bin:/bin", "HOME": str(ray_home),
               **compose_layout(ray, image_env(ROOT / ray_image), fs)}
    temp_dir = Path(f"/tmp/raylift-compose-{os.getpid()}")  # Ray's socket paths must stay short
    head_command = network.ray_head_command(RAY_SERVICE, ray["command"], temp_dir)
    health = _command(ray["healthcheck"]["test"][1:], network, fs)
    dashboard = network.published(RAY_SERVICE, DASHBOARD_PORT)
    serve = network.published(RAY_SERVICE, SERVE_PORT)

    airflow = services[AIRFLOW_SERVICE]
    airflow_image = airflow["build"]["dockerfile"]
    log = tmp_path / "ray-head.log"
    # `docker compose up -d`: the head starts while the rest is laid out
    with ray_head(head_command, ray_env, ray_home, temp_dir, log) as head:
        # the README's model step: `docker compose run --rm --no-deps -v ... ray-head python ...`
        step = readme_compose_model_step()
        assert step.service == RAY_SERVICE, step
        for container, host in step.binds.items():
            (fs / container.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (fs / container.lstrip("/")).symlink_to(host, target_is_directory=True)
        made = subprocess.run(_command(step.command, network, fs), env=ray_env, cwd=ray_home,
                              capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stderr[-3000:]

        # the Airflow image's layout and the scheduler's environment, the DB by airflow-init's command
        python = install_airflow_image(ROOT / airflow_image, fs, tmp_path / "venv")
        layout = compose_layout(airflow, image_env(ROOT / airflow_image), fs)
        airflow_home = Path(layout["AIRFLOW_HOME"])
        home = fs / IMAGE_HOMES[airflow_image].lstrip("/")
        home.mkdir(parents=True)
        airflow_env = {"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(home),
                       **network.airflow_env(layout, airflow_home)}
        # the stack's Fernet key: airflow-fernet-key's own script (Compose unescapes its $$), its key file under fs,
        # read as the services' AIRFLOW__CORE__FERNET_KEY_CMD reads it
        key_step = services["airflow-fernet-key"]
        key_env = {"PATH": "/usr/bin:/bin", **compose_layout(key_step, {}, fs)}
        keyed = subprocess.run(["/bin/sh", "-c", str(key_step["command"][0]).replace("$$", "$")], env=key_env,
                               capture_output=True, text=True, timeout=60)
        assert keyed.returncode == 0, keyed.stderr[-2000:]
        airflow_env["AIRFLOW__CORE__FERNET_KEY_CMD"] = f"cat {key_env['RAYLIFT_FERNET_KEY_FILE']}"

        def airflow_cli(words: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
            assert words[0] == "airflow", words
            return subprocess.run([str(python), "-m", "airflow", *words[1:]], env=airflow_env,
                                  cwd=airflow_home, capture_output=True, text=True, timeout=timeout)

        migrated = airflow_cli(services["airflow-init"]["command"], timeout=300)
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        wait_healthy(head, health, ray_env, log)

        conf = _on_host(readme_compose_trigger(), network, fs)
        started = time.monotonic()
        try:
            run = airflow_cli(["airflow", "dags", "test", "raylift_deploy", "--conf", json.dumps(conf)],
                              timeout=DAG_TIMEOUT_S)
        finally:
            print(f"raylift_deploy with the README's Compose conf: {time.monotonic() - started:.0f} s")
        (tmp_path / "dags-test.log").write_text(run.stdout + run.stderr)
        failed = [ln for ln in (run.stdout + run.stderr).splitlines() if "Error" in ln]
        assert run.returncode == 0, "\n".join(failed)[-4000:] + _tail(log, 1500)
        # the DAG ran the wheel in the layout venv, not the checkout
        where = subprocess.run([str(python), "-c", "import raylift; print(raylift.__file__)"], env=airflow_env,
                               capture_output=True, text=True, timeout=60)
        assert Path(where.stdout.strip()).is_relative_to(tmp_path / "venv"), where.stdout + where.stderr[-1000:]

        # the README's `curl -s http://127.0.0.1:8000/v1/models`, and the openai SDK's view of it
        models = httpx.get(f"{serve}/v1/models", timeout=10)
        assert models.status_code == 200, models.text[:500]
        assert [m["id"] for m in models.json()["data"]] == [conf["served_name"]]
        sdk = subprocess.run(
            [str(RUNTIME_BIN / "python"), "-c",
             "import openai, sys; c = openai.OpenAI(base_url=sys.argv[1] + '/v1', api_key='unused', "
             "max_retries=0); print([m.id for m in c.models.list()])", serve],
            capture_output=True, text=True, timeout=120,
        )
        assert sdk.returncode == 0, sdk.stderr[-2000:]
        assert sdk.stdout.strip() == repr([conf["served_name"]])

        # Ray Serve's own status of the app on that cluster
        status = subprocess.run([str(RUNTIME_BIN / "serve"), "status", "--address", dashboard], env=ray_env,
                                capture_output=True, text=True, timeout=120)
        assert status.returncode == 0, status.stderr[-2000:]
        assert yaml.safe_load(status.stdout)["applications"][APP]["status"] == "RUNNING", status.stdout
