"""The benchmark reports app, mounted the way the api-server mounts plugin apps, served on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
from fastapi import FastAPI

from raylift.config import REPORTS_URL_PREFIX
from raylift.measure.report import report_url, write_report
from raylift.operators.benchmark import BenchmarkReportLink
from raylift.release.state import run_key
from tests.bench.test_cost_gates_report import _level, _result
from tests.fixtures.plugin_server import serve_airflow_plugins, signed_in_as

RUN_ID = "manual__2026-11-23T02:21:47.123456+00:00"
OTHER_DAG_RUN = "other_dag.manual__1.0123456789abcdef"  # run_name's form under a DAG that is not the deploy DAG


class DagScopedAuthManager(SimpleAuthManager):
    """Airflow's simple auth manager plus one per-DAG grant, as a real deployment's auth manager (FAB's DAG-level
    permissions, Keycloak) answers ``is_authorized_dag`` (BaseAuthManager's interface): user ``stranger`` may read
    the runs of ``other_dag`` only; everyone else as the simple auth manager says."""

    def is_authorized_dag(self, *, method: Any, user: SimpleAuthManagerUser,
                          access_entity: DagAccessEntity | None = None, details: DagDetails | None = None) -> bool:
        if user.username == "stranger":
            return details is not None and details.id == "other_dag"
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """RAYLIFT_HOME's model store with one real report in its runs folder, plus things never to serve."""
    home = tmp_path_factory.mktemp("home")
    root = home / "model-store/_raylift/runs"
    write_report(_result([_level(1, 100, 50), _level(4, 300, 90)]), root / run_key(RUN_ID).rsplit("/", 1)[1])
    outside = root.parent.parent / "secret.json"
    outside.write_text('{"secret": true}')
    (root / "evil").mkdir()
    (root / "evil/leak.json").symlink_to(outside)
    (root / "linked").symlink_to(root.parent.parent)  # a run folder that is really the store root
    (root / "evil/.hidden.json").write_text("{}")
    (root / "evil/notes.py").write_text("print('x')")
    (root / OTHER_DAG_RUN).mkdir()
    (root / OTHER_DAG_RUN / "benchmark.html").write_text("<p>another DAG's run</p>")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAYLIFT_HOME", str(home))  # the plugin's app finds the runs folder from it
        env.setenv("AIRFLOW__CORE__AUTH_MANAGER", f"{__name__}.DagScopedAuthManager")
        yield root


@pytest.fixture(scope="module")
def plugins(runs: Path) -> Iterator[tuple[str, FastAPI]]:
    """What Airflow's api-server mounts from plugins, on 127.0.0.1, with its auth manager."""
    with serve_airflow_plugins() as (url, parent):
        assert [r.path for r in parent.routes if r.path == REPORTS_URL_PREFIX], "raylift plugin app not mounted"
        yield url, parent


@pytest.fixture()
def server(plugins: tuple[str, FastAPI]) -> Iterator[str]:
    """The plugin apps, every request from a signed-in viewer (the least Airflow role)."""
    url, parent = plugins
    with signed_in_as(parent, SimpleAuthManagerUser(username="viewer", role="viewer")):
        yield url


def test_loading_the_plugin_builds_no_app() -> None:
    """Airflow loads plugins in every process (each task's runner, for macros) and only the api-server serves the
    reports app: loading the plugin must not build it (the tests below reach it through the mount, which builds it
    on the first request)."""
    code = ("import sys, raylift.plugin as p; app = p.RayliftPlugin.fastapi_apps[0]['app']; "
            "print(type(app).__name__, 'raylift.reports_app' in sys.modules, type(getattr(app, 'app', app)).__name__)")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "plugins")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ReportsApp", "False", "FastAPI"], done.stdout


@pytest.mark.parametrize("path", ["/", f"/runs/{RUN_ID}/", f"/runs/{run_key(RUN_ID).rsplit('/', 1)[1]}/benchmark.html",
                                  f"/runs/{run_key(RUN_ID).rsplit('/', 1)[1]}/benchmark.json"])
def test_every_route_needs_an_airflow_user(plugins: tuple[str, FastAPI], path: str) -> None:
    """Airflow authenticates no plugin app: without the app's own dependency each of these answered 200 to anyone."""
    url = plugins[0] + REPORTS_URL_PREFIX + path
    anonymous = httpx.get(url, timeout=10)
    assert anonymous.status_code == 401 and "TTFT" not in anonymous.text, anonymous.text[:200]
    forged = {"Authorization": "Bearer not-a-jwt"}
    assert httpx.get(url, headers=forged, timeout=10).status_code == 403
    assert httpx.get(url, cookies={COOKIE_NAME_JWT_TOKEN: "not-a-jwt"}, timeout=10).status_code == 403


def test_extra_link_points_at_the_report_page(server: str) -> None:
    class Key:
        run_id = RUN_ID

    link = BenchmarkReportLink().get_link(None, ti_key=Key())  # type: ignore[arg-type]
    assert link == report_url(run_key(RUN_ID).rsplit("/", 1)[1])
    page = httpx.get(server + link, timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "raylift benchmark" in page.text and "TTFT p50" in page.text and "data:image/png;base64," in page.text
    assert "script-src" not in page.headers["content-security-policy"]  # default-src 'none': no scripts


def test_index_and_run_page_lead_to_the_report(server: str) -> None:
    index = httpx.get(f"{server}{REPORTS_URL_PREFIX}/", timeout=10)
    folder = run_key(RUN_ID).rsplit("/", 1)[1]
    assert index.status_code == 200 and f'href="runs/{folder}/"' in index.text
    # the Dag run tab uses Airflow's run id; the app maps it to the folder and redirects to the page
    page = httpx.get(f"{server}{REPORTS_URL_PREFIX}/runs/{RUN_ID}/", timeout=10, follow_redirects=True)
    assert page.status_code == 200 and str(page.url).endswith(f"/runs/{folder}/benchmark.html")


def test_png_and_csv_are_served_with_their_types(server: str) -> None:
    base = f"{server}{REPORTS_URL_PREFIX}/runs/{run_key(RUN_ID).rsplit('/', 1)[1]}"
    png = httpx.get(f"{base}/benchmark-latency.png", timeout=10)
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n") and len(png.content) > 5000
    csv = httpx.get(f"{base}/benchmark.csv", timeout=10)
    assert csv.status_code == 200 and csv.text.startswith("concurrency,requests,")


@pytest.mark.parametrize("path", [
    "/runs/evil/leak.json",              # a symlink out of the runs folder
    "/runs/linked/secret.json",          # a run folder that is a symlink to the store root
    "/runs/evil/.hidden.json",           # dotfiles
    "/runs/evil/notes.py",               # not a report file type
    "/runs/../secret.json",              # traversal, plain (the client normalises it: a 404 either way)
    "/runs/%2e%2e/secret.json",          # traversal, encoded dots
    "/runs/evil/..%2f..%2fsecret.json",  # traversal, encoded slashes
    "/runs/..%2f..%2f/secret.json",
    "/runs/%2e%2e%2f%2e%2e/secret.json",
    "/runs/nosuchrun/",
])
def test_refuses_anything_but_report_files_in_the_runs_folder(server: str, path: str) -> None:
    resp = httpx.get(f"{server}{REPORTS_URL_PREFIX}{path}", timeout=10)
    assert resp.status_code == 404, (path, resp.status_code, resp.text[:200])
    assert "secret" not in resp.text


def test_read_only(server: str) -> None:
    url = f"{server}{REPORTS_URL_PREFIX}/runs/{run_key(RUN_ID).rsplit('/', 1)[1]}/benchmark.json"
    assert httpx.get(url, timeout=10).status_code == 200
    for method in ("POST", "PUT", "DELETE"):
        assert httpx.request(method, url, timeout=10).status_code == 405


def test_a_user_reads_only_runs_of_dags_they_may_read(plugins: tuple[str, FastAPI]) -> None:
    """Issue 57: any signed-in user read every run's report. Now the auth manager decides per DAG (as for
    Airflow's own dagRuns routes): ``stranger`` may not read the deploy DAG, so its runs are 403 and not listed."""
    url, parent = plugins
    folder = run_key(RUN_ID).rsplit("/", 1)[1]
    with signed_in_as(parent, SimpleAuthManagerUser(username="stranger", role="viewer")):
        for path in (f"/runs/{RUN_ID}/", f"/runs/{folder}/", f"/runs/{folder}/benchmark.html",
                     f"/runs/{folder}/benchmark.json", "/runs/evil/notes.py"):
            resp = httpx.get(f"{url}{REPORTS_URL_PREFIX}{path}", timeout=10)
            assert resp.status_code in (403, 404) and "TTFT" not in resp.text, (path, resp.status_code)
        assert httpx.get(f"{url}{REPORTS_URL_PREFIX}/runs/{folder}/benchmark.json", timeout=10).status_code == 403
        index = httpx.get(f"{url}{REPORTS_URL_PREFIX}/", timeout=10)
        assert index.status_code == 200 and folder not in index.text
    with signed_in_as(parent, SimpleAuthManagerUser(username="viewer", role="viewer")):
        assert httpx.get(f"{url}{REPORTS_URL_PREFIX}/runs/{folder}/benchmark.json", timeout=10).status_code == 200


def test_a_run_of_no_known_dag_is_read_by_nobody(server: str) -> None:
    """A folder in run_name's form under another DAG's name: raylift cannot tell exactly which DAG wrote it (DAG
    ids may hold dots), so it is neither listed nor served, even to a user who may read every DAG."""
    resp = httpx.get(f"{server}{REPORTS_URL_PREFIX}/runs/{OTHER_DAG_RUN}/benchmark.html", timeout=10)
    assert resp.status_code == 403 and "another DAG" not in resp.text
    assert OTHER_DAG_RUN not in httpx.get(f"{server}{REPORTS_URL_PREFIX}/", timeout=10).text
