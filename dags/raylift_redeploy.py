"""Airflow DAG file for raylift_redeploy: the DAG ships in the raylift package (raylift.dags.redeploy)."""

from raylift.dags.redeploy import dag  # noqa: F401  (the DAG processor keeps this file's top-level DAG)
