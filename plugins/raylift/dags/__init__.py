"""raylift's DAGs, shipped in the package so that an installed raylift carries them.

Airflow only parses files in its DAGs folder, so each DAG needs one short file there that imports it (the
DAG processor keeps the top-level ``DAG`` objects of the files it parses, and records that file as the DAG's
location). :func:`raylift.dags.install.main` (``python -m raylift.dags.install <dags folder>``) writes them;
this repository's own ``dags/`` folder holds the same files.
"""

from __future__ import annotations

# The DAG id -> the module of this package that defines it (``dag`` at module level).
DAG_MODULES: dict[str, str] = {
    "raylift_deploy": "raylift.dags.deploy",
    "raylift_redeploy": "raylift.dags.redeploy",
    "raylift_stage_model": "raylift.dags.stage_model",
    "raylift_teardown": "raylift.dags.teardown",
    "raylift_undeploy": "raylift.dags.undeploy",
}


def _check_airflow() -> None:
    """Refuse, at parse time with a clear message, an Airflow older than raylift supports (raylift.compat)."""
    from raylift.compat import airflow_version

    airflow_version()


_check_airflow()
