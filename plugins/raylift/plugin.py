"""Airflow plugin (registered through the ``airflow.plugins`` entry point, not the plugins folder).

Puts the benchmark reports into the Airflow UI: the read-only reports app
(:mod:`raylift.reports_app`) mounted on the api-server at :data:`raylift.config.REPORTS_URL_PREFIX`,
a "Benchmark reports" entry in the navigation, a "Benchmark report" tab on each Dag run, and the
benchmark task's "Benchmark report" extra link.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from raylift.config import REPORTS_URL_PREFIX
from raylift.operators.benchmark import BenchmarkReportLink


def _reports_app() -> dict:
    from raylift.reports_app import create_app

    return {"app": create_app(), "url_prefix": REPORTS_URL_PREFIX, "name": "raylift benchmark reports"}


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
