"""Benchmark reports in the Airflow UI: a read-only FastAPI app the raylift plugin mounts on the api-server.

It serves the files the benchmark step writes into the model store's run folders
(``<model store>/_raylift/runs/<run>/benchmark.html``, ``.png``, ``.json``, ``.csv``) and nothing
else: names are checked against a strict pattern and an extension allow-list, the resolved path must
lie inside the runs folder (symlinks out of it are refused), and only GET/HEAD exist. Pages carry a
Content-Security-Policy without scripts. Every route needs an authenticated Airflow user: Airflow does not
authenticate plugin apps (a Starlette mount inherits none of the core API's dependencies), so the app
declares Airflow's own ``get_user`` dependency, which reads the UI's session cookie or a bearer token
(``POST /auth/token``) exactly as the public API does: 401 without one, 403 for an invalid one.

A signed-in user reads only the runs of DAGs they may read: each run folder belongs to a DAG (:func:`owner_dag`),
and the auth manager's own ``is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN, ...)`` decides,
as Airflow's ``requires_access_dag`` does for ``/api/v2/dags/{dag_id}/dagRuns`` (with the DAG's team when
``[core] multi_team`` is on): 403 for a run of a DAG the user may not read, and the index lists only readable
runs. Routes, under :data:`raylift.config.REPORTS_URL_PREFIX`:

- ``/`` — the runs that have a report, newest first;
- ``/runs/<run id>/`` — that run's report page (``benchmark.html``), else a list of its files;
- ``/runs/<run id>/<file>`` — one file.

``<run id>`` may be Airflow's run id or its folder name: both map to the folder as
:func:`raylift.release.state.run_key` does.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from raylift.config import DEPLOY_DAG_ID, local_settings
from raylift.release.state import legacy_run_name, run_key, run_name

if TYPE_CHECKING:
    from airflow.api_fastapi.auth.managers.models.base_user import BaseUser

MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".png": "image/png", ".json": "application/json",
               ".csv": "text/csv; charset=utf-8"}
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,199}$")
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} li{{margin:.2em 0}}</style></head>
<body><h1>{title}</h1>{body}</body></html>"""


def default_runs_root() -> Path:
    """The local model store's runs folder (where the benchmark step writes its reports)."""
    return local_settings().model_store / Path(run_key("_")).parent


def _folder(root: Path, run: str) -> Path:
    """The run's folder, or 404: the name must be plain and the folder inside ``root``."""
    name = run_key(run).rsplit("/", 1)[1]
    if not _NAME.match(name):
        raise HTTPException(404, "no such run")
    folder = (root / name).resolve()
    if folder.parent != root or not folder.is_dir():
        raise HTTPException(404, f"no benchmark report for run {run!r}")
    return folder


def owner_dag(name: str) -> str | None:
    """The DAG run folder ``name`` belongs to, None when unknown (then no user reads it here). Every writer names
    runs of the deploy DAG (``run_key``'s default): a folder in ``run_name``'s form under that DAG's name, or an
    older folder (the lossy spelling, written only by the deploy DAG before issue 57). A folder in ``run_name``'s
    form under any other name has no known DAG (a DAG id with dots reads ambiguously, so none is guessed)."""
    if run_key(name).rsplit("/", 1)[1] != name:
        return DEPLOY_DAG_ID if legacy_run_name(name) == name else None  # pre-issue-57 spelling
    return DEPLOY_DAG_ID if name.startswith(f"{run_name('_', DEPLOY_DAG_ID).split('.', 1)[0]}.") else None


def may_read_runs(user: BaseUser, dag_id: str | None) -> bool:
    """Whether ``user`` may read the runs of ``dag_id``, by the auth manager (the same call as Airflow's
    ``requires_access_dag("GET", DagAccessEntity.RUN)``); an unknown DAG: no."""
    if dag_id is None:
        return False
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
    from airflow.configuration import conf

    team: str | None = None
    if conf.getboolean("core", "multi_team", fallback=False):
        from airflow.models.dag import DagModel

        team = DagModel.get_team_name(dag_id)
    return bool(get_auth_manager().is_authorized_dag(method="GET", access_entity=DagAccessEntity.RUN,
                                                     details=DagDetails(id=dag_id, team_name=team), user=user))


def _page(title: str, body: str) -> HTMLResponse:
    return HTMLResponse(_PAGE.format(title=html.escape(title), body=body), headers=_HEADERS)


def create_app(runs_root: Path | Callable[[], Path] = default_runs_root) -> FastAPI:
    """The reports app over ``runs_root`` (a folder, or a function giving it per request, so a
    long-running api-server follows ``RAYLIFT_HOME``)."""
    from airflow.api_fastapi.core_api.security import get_user

    app = FastAPI(title="raylift benchmark reports", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(get_user)])
    user_dep: Any = Depends(get_user)

    def readable(user: BaseUser, run: str) -> Path:
        """The run's folder, or 404 (no such run) / 403 (a run of a DAG ``user`` may not read)."""
        folder = _folder(root(), run)
        if not may_read_runs(user, owner_dag(folder.name)):
            raise HTTPException(403, f"you may not read the runs of the DAG that run {run!r} belongs to")
        return folder

    def root() -> Path:
        return (runs_root() if callable(runs_root) else runs_root).resolve()

    @app.get("/", response_class=HTMLResponse)
    def index(user: Any = user_dep) -> HTMLResponse:
        base = root()
        allowed: dict[str | None, bool] = {}  # one auth-manager question per DAG, not per run

        def may(name: str) -> bool:
            dag = owner_dag(name)
            if dag not in allowed:
                allowed[dag] = may_read_runs(user, dag)
            return allowed[dag]

        runs = sorted(
            (p for p in base.glob("*/benchmark.html")
             if p.parent.parent == base and _NAME.match(p.parent.name) and may(p.parent.name)),
            key=lambda p: p.stat().st_mtime, reverse=True,
        )[:200]
        items = "".join(
            f'<li><a href="runs/{html.escape(p.parent.name)}/">{html.escape(p.parent.name)}</a></li>' for p in runs
        )
        return _page("raylift benchmark reports", f"<ul>{items}</ul>" if items else "<p>No reports yet.</p>")

    @app.get("/runs/{run}/", response_model=None)
    def run_page(run: str, user: Any = user_dep) -> Response:
        folder = readable(user, run)
        if (folder / "benchmark.html").is_file():
            return RedirectResponse(f"../{folder.name}/benchmark.html", status_code=307)
        files = sorted(p.name for p in folder.iterdir() if p.is_file() and p.suffix in MEDIA_TYPES)
        items = "".join(f'<li><a href="{html.escape(n)}">{html.escape(n)}</a></li>' for n in files)
        return _page(f"run {folder.name}", f"<p>No report page; files:</p><ul>{items}</ul>")

    @app.get("/runs/{run}/{name}", response_model=None)
    def run_file(run: str, name: str, user: Any = user_dep) -> Response:
        folder = readable(user, run)
        path = (folder / name).resolve()
        media = MEDIA_TYPES.get(path.suffix)
        if not _NAME.match(name) or media is None or path.parent != folder or not path.is_file():
            raise HTTPException(404, "no such report file")
        return FileResponse(path, media_type=media, headers=_HEADERS)

    return app
