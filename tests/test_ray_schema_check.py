"""Ray's Serve schema check, where the cluster's Ray is: the stand-alone script (run here by the runtime env's Python:
the real Ray judges), the ``ray`` and ``ecs`` targets sending it as a Ray job (a dashboard stand-in that runs the
job's entrypoint with the runtime env's Python), and the deploy's fit check calling it once per deploy, or saying
that the cluster judges at apply where the target cannot."""

from __future__ import annotations

import json
import logging
import os
import shlex
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raylift.errors import ClusterError, ServeFitError
from raylift.records import ClusterState
from raylift.release.canary import baseline_name, canary_name
from raylift.release.start import fit_check
from raylift.serve.validation import SCHEMA_SCRIPT, schema_script_source
from raylift.targets.base import ServeSchemaChecker
from tests.fixtures.http_standin import JsonHandler, serve_http

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ROOT / ".cache/venvs/runtime/bin/python"
needs_runtime = pytest.mark.skipif(
    not RUNTIME.exists(),
    reason=f"Ray's schema check runs in the runtime env ({RUNTIME}), which is not built: bash tools/setup.sh runtime",
)


WARNED = "deployments[D].num_replica is not a field of Ray's Serve schema: Serve ignores it (a typo?)"


def app(name: str = "app", **deployment: Any) -> dict[str, Any]:
    dep = {"name": "D", "num_replicas": 1, "ray_actor_options": {"num_cpus": 1}, **deployment}
    return {"name": name, "import_path": "translator.app:build_app", "route_prefix": f"/{name}", "deployments": [dep]}


def run_script(*args: str, stdin: str | None = None) -> dict[str, Any]:
    """The script as a user (or the local target) runs it, from a folder where raylift is not importable."""
    proc = subprocess.run([str(RUNTIME), *args], input=stdin, capture_output=True, text=True, timeout=120,
                          cwd="/", env={"PATH": os.environ["PATH"]}, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (line,) = proc.stdout.splitlines()  # one verdict line, nothing else
    verdict: dict[str, Any] = json.loads(line)
    return verdict


@needs_runtime
def test_the_script_gives_rays_verdict_from_argv_stdin_and_as_python_c() -> None:
    config = {"applications": [app(num_replicas=-1, num_replica=3), app("other", port=8001)]}
    refused = run_script(str(SCHEMA_SCRIPT), json.dumps(config), "app")
    assert refused["ok"] is False and refused["stage"] == "app" and refused["app"] == "app"
    assert refused["problems"] == [
        "deployments[D].num_replicas: Input should be greater than 0 or Input should be a valid string (got -1) "
        "(Ray's ServeApplicationSchema)"]
    assert refused["ray"].count(".") == 2  # the version of the Ray that judged
    fine = {"applications": [app(num_replica=3), app("other")]}
    ok = run_script(str(SCHEMA_SCRIPT), "-", "app", stdin=json.dumps(fine))
    assert ok == {"ok": True, "ray": refused["ray"], "warnings": [
        "deployments[D].num_replica is not a field of Ray's Serve schema: Serve ignores it (a typo?)"]}
    # as the ray target sends it: the script's text, no file of raylift's on the cluster
    same = run_script("-c", schema_script_source(), json.dumps(fine), "app")
    assert same == ok


@needs_runtime
def test_the_whole_config_is_judged_with_the_other_apps_ray_accepts() -> None:
    """Two apps on one route are refused by ServeDeploySchema; another app Ray itself refuses is Serve's business,
    not this deploy's (left out of the whole-config check, as the fit check leaves it out of the cluster's room)."""
    clash = {"applications": [app(), {**app("other"), "route_prefix": "/app"}]}
    verdict = run_script(str(SCHEMA_SCRIPT), json.dumps(clash), "app")
    assert verdict["ok"] is False and verdict["stage"] == "deploy"
    assert verdict["problems"] == ['applications: Found duplicate applications for route prefix "/app". Please ensure '
                                   "each application's route_prefix is unique (Ray's ServeDeploySchema)"]
    broken_other = {"applications": [app(), {**app("other", num_replicas=0), "route_prefix": "/app"}]}
    assert run_script(str(SCHEMA_SCRIPT), json.dumps(broken_other), "app")["ok"] is True


# -- the ray and ecs targets: a Ray job on the cluster's head -------------------------------------------------------
class JobHead:
    """A Ray dashboard stand-in whose Jobs API runs each job's entrypoint here, with the runtime env's Python as
    ``python`` (the head's), and reports its status and logs as Ray's does."""

    def __init__(self) -> None:
        self.jobs: dict[str, tuple[str, str]] = {}
        self.entrypoints: list[str] = []
        self.lock = threading.Lock()


@pytest.fixture()
def head() -> Iterator[tuple[JobHead, int]]:
    state = JobHead()

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            job = self.path.split("/")[3] if self.path.startswith("/api/jobs/") else ""
            if job in state.jobs and self.path.endswith("/logs"):
                self._json({"logs": state.jobs[job][1]})
            elif job in state.jobs:
                self._json({"status": state.jobs[job][0], "message": ""})
            else:
                self.send_error(404)

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            entrypoint = body["entrypoint"]
            env = {"PATH": f"{RUNTIME.parent}{os.pathsep}{os.environ['PATH']}"}
            proc = subprocess.run(entrypoint, shell=True, capture_output=True, text=True, timeout=120, env=env,
                                  cwd="/", check=False)
            with state.lock:
                name = f"raysubmit_{len(state.jobs)}"
                state.entrypoints.append(entrypoint)
                state.jobs[name] = ("SUCCEEDED" if proc.returncode == 0 else "FAILED",
                                    "2026-01-01 job started\n" + proc.stdout + proc.stderr)
            self._json({"submission_id": name})

    with serve_http(Handler) as port:
        yield state, port


def job_target(kind: str, port: int) -> Any:
    from raylift.targets import get_target

    if kind == "ray":
        return get_target("ray", dashboard_url=f"http://127.0.0.1:{port}", serve_url="http://127.0.0.1:1")
    return get_target("ecs", cluster="ray", bucket="b", head_address="127.0.0.1", dashboard_port=port)


@needs_runtime
@pytest.mark.parametrize("kind", ["ray", "ecs"])
def test_ray_and_ecs_send_the_script_as_a_ray_job(kind: str, head: tuple[JobHead, int]) -> None:
    state, port = head
    target = job_target(kind, port)
    assert isinstance(target, ServeSchemaChecker)
    warnings = target.check_serve_schema({"applications": [app(num_replica=3)]}, "app")
    assert warnings == ["deployments[D].num_replica is not a field of Ray's Serve schema: Serve ignores it (a typo?)"]
    words = shlex.split(state.entrypoints[-1])
    assert words[:3] == ["python", "-c", schema_script_source()] and words[4] == "app"
    with pytest.raises(ServeFitError) as err:
        target.check_serve_schema(
            {"applications": [app(placement_group_bundles=[{"CPU": 1}], placement_group_strategy="TIGHT")]}, "app")
    message = str(err.value)
    assert message.startswith("Serve app 'app' is not a valid config: deployments[D].placement_group_bundles/"
                              "placement_group_strategy: Invalid placement group strategy TIGHT")
    assert "Nothing was deployed" in message and f"of the cluster at http://127.0.0.1:{port}" in message


@pytest.mark.parametrize("kind", ["ray", "ecs"])
def test_a_job_that_gives_no_verdict_is_a_cluster_error(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A head whose Python has no Ray (the job fails): the deploy stops, naming the cluster, rather than deploying
    unchecked."""
    target = job_target(kind, 9)
    monkeypatch.setattr("raylift.targets.ray_jobs.RayJobChecks.run_job",
                        lambda self, entrypoint, *a, **k: ("FAILED", "ModuleNotFoundError: No module named 'ray'"))
    with pytest.raises(ClusterError, match=r"Could not check the Serve config with the Ray of the cluster at "
                                           r"http://127.0.0.1:9 \(job FAILED\).*No module named 'ray'"):
        target.check_serve_schema({"applications": [app()]}, "app")


# -- the local target: the runtime env's Python ---------------------------------------------------------------------
@needs_runtime
def test_local_runs_the_script_with_its_runtime_python(tmp_path: Path) -> None:
    from raylift.config import LocalSettings
    from raylift.targets.local import LocalTarget

    checks = tmp_path / "checks"
    target = LocalTarget(settings=LocalSettings(home=tmp_path, runtime_python=RUNTIME, check_cache=checks))
    assert target.check_serve_schema({"applications": [app(num_replica=3)]}, "app") == [WARNED]
    (kept,) = (checks / "serve-schema").iterdir()  # an accepted verdict is kept, for this Ray and this script
    kept.write_text(json.dumps({"app": "app", "warnings": ["from the kept verdict"]}))
    assert target.check_serve_schema({"applications": [app(num_replica=3)]}, "app") == ["from the kept verdict"]
    for _ in range(2):  # a refusal is not kept: judged again
        with pytest.raises(ServeFitError, match=r"Serve app 'app' is not a valid config: deployments\[D\]\.num_replicas: "
                                                r"Input should be greater than 0.*Judged by Ray 2\.\d+\.\d+ of the "
                                                "runtime env at"):
            target.check_serve_schema({"applications": [app(num_replicas=0)]}, "app")
    assert len(list((checks / "serve-schema").iterdir())) == 1


@pytest.mark.component  # tries to start the runtime's Python
def test_local_without_a_runtime_python_is_a_cluster_error(tmp_path: Path) -> None:
    from raylift.config import LocalSettings
    from raylift.targets.local import LocalTarget

    target = LocalTarget(settings=LocalSettings(home=tmp_path, runtime_python=tmp_path / "no-runtime/bin/python"))
    with pytest.raises(ClusterError, match="Could not check the Serve config with the Ray of the runtime env"):
        target.check_serve_schema({"applications": [app()]}, "app")


# -- which targets have the capability; the deploy's fit check calls it once --------------------------------------
def test_the_capability_is_present_or_absent_by_target() -> None:
    from raylift.targets.ecs import EcsTarget
    from raylift.targets.eks import EksTarget
    from raylift.targets.local import LocalTarget
    from raylift.targets.ray_cluster import RayClusterTarget

    for kind in (LocalTarget, RayClusterTarget, EcsTarget):
        assert issubclass(kind, ServeSchemaChecker), kind
    assert not issubclass(EksTarget, ServeSchemaChecker)  # its dashboard is inside the cluster: judged at apply


class CountingTarget:
    """A target whose Ray schema check records what it was asked (the config, the app) and answers ``warnings``."""

    name = "counting"

    def __init__(self) -> None:
        self.asked: list[tuple[dict[str, Any], str]] = []

    def cluster_state(self) -> ClusterState:
        return ClusterState(nodes=1, resources={"CPU": 16.0}, node_resources=[{"CPU": 16.0}])

    def check_serve_schema(self, config: dict[str, Any], app_name: str) -> list[str]:
        self.asked.append((config, app_name))
        return ["a field Ray ignores"]


def test_the_deploys_fit_check_asks_ray_once_for_the_whole_config(caplog: pytest.LogCaptureFixture) -> None:
    """The app beside the other running apps (its own running version left out), once per deploy task: the later fit
    checks weigh raylift's own shapes of it (the surge peak, the canary and its fresh baseline)."""
    from raylift.release.rollout import with_surge

    target = CountingTarget()
    running_old, other = app(num_replicas=2), app("other")
    current = {"applications": [running_old, other]}
    new = app(num_replicas=3)
    with caplog.at_level(logging.WARNING, logger="raylift.release.start"):
        report = fit_check(target, new, current)  # type: ignore[arg-type]
    assert target.asked == [({"applications": [new, other]}, "app")]
    assert report.warnings[0] == "a field Ray ignores" and "a field Ray ignores" in caplog.text
    fit_check(target, with_surge(new, 1), current)  # type: ignore[arg-type]
    for derived in (canary_name("app"), baseline_name("app")):
        fit_check(target, {**app(derived), "route_prefix": f"/_{derived}"}, current)  # type: ignore[arg-type]
    assert len(target.asked) == 1
    fit_check(target, app("another"), current)  # type: ignore[arg-type]  # another app: judged
    assert [name for _, name in target.asked] == ["app", "another"]
    assert len(CountingTarget().asked) == 0 and fit_check(CountingTarget(), new, current).warnings  # type: ignore[arg-type]


def test_a_ray_refusal_stops_the_fit_check_before_the_arithmetic() -> None:
    class Refusing(CountingTarget):
        def check_serve_schema(self, config: dict[str, Any], app_name: str) -> list[str]:
            raise ServeFitError("Serve app 'app' is not a valid config: Ray says no")

    target = Refusing()
    with pytest.raises(ServeFitError, match="Ray says no"):
        fit_check(target, app(), {"applications": []})  # type: ignore[arg-type]
    with pytest.raises(ServeFitError, match="Ray says no"):  # not remembered as judged: asked again
        fit_check(target, app(), {"applications": []})  # type: ignore[arg-type]


def test_a_target_without_the_capability_says_the_cluster_judges_at_apply(caplog: pytest.LogCaptureFixture) -> None:
    class NoJobs:
        name = "eks"

        def cluster_state(self) -> ClusterState:
            return ClusterState(nodes=1, resources={"CPU": 16.0}, node_resources=[{"CPU": 16.0}])

    target = NoJobs()
    assert not isinstance(target, ServeSchemaChecker)
    with caplog.at_level(logging.INFO, logger="raylift.release.start"):
        report = fit_check(target, app(), {"applications": []})  # type: ignore[arg-type]
        fit_check(target, app(num_replicas=2), {"applications": []})  # type: ignore[arg-type]
    said = [r for r in caplog.records if "schema check" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO
    assert said[0].getMessage().startswith(
        "Ray's Serve schema check of app 'app' is left to the cluster at apply: the eks target cannot run")
    assert report.lines == ["CPU: needs 1 = 1 x 1 (D); cluster has 16, other apps hold 0"]
