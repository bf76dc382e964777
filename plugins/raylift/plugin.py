"""Airflow plugin (registered through the ``airflow.plugins`` entry point, not the plugins folder).

Puts the benchmark reports into the Airflow UI: the read-only reports app
(:mod:`raylift.reports_app`) mounted on the api-server at :data:`raylift.config.REPORTS_URL_PREFIX`,
a "Benchmark reports" entry in the navigation, a "Benchmark report" tab on each Dag run, and the
benchmark task's "Benchmark report" extra link.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from airflow.plugins_manager import AirflowPlugin

from raylift.config import REPORTS_URL_PREFIX
from raylift.operators.benchmark import BenchmarkReportLink

if TYPE_CHECKING:
    from fastapi import FastAPI


class ReportsApp:
    """The reports app as an ASGI app that builds itself on its first request.

    Airflow loads plugins in every process, each task's runner included (for macros), and only the api-server
    ever serves this app; building it (FastAPI and its routes) on load cost each of those processes 1.4 s of CPU
    (bench/airflow_process_cost.py)."""

    def __init__(self) -> None:
        self._app: FastAPI | None = None
        self._lock = threading.Lock()

    @property
    def app(self) -> FastAPI:
        """The FastAPI app, built once (the lock only while it is built, not on every request)."""
        if self._app is None:
            with self._lock:
                if self._app is None:
                    from raylift.reports_app import create_app

                    self._app = create_app()
        return self._app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def _reports_app() -> dict[str, Any]:
    return {"app": ReportsApp(), "url_prefix": REPORTS_URL_PREFIX, "name": "raylift benchmark reports"}


class RayliftPlugin(AirflowPlugin):
    name = "raylift"
    fastapi_apps = [_reports_app()]
    external_views = [
        {"name": "Benchmark reports", "href": f"{REPORTS_URL_PREFIX}/", "destination": "nav",
         "category": "browse", "url_route": "raylift-reports"},
        # {RUN_ID} is filled in by the UI; the app maps a run id to its folder.
        {"name": "Benchmark report", "href": f"{REPORTS_URL_PREFIX}/runs/{{RUN_ID}}/", "destination": "dag_run",
         "url_route": "raylift-run-report"},
    ]
    operator_extra_links = [BenchmarkReportLink()]
