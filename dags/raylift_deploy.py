"""Airflow DAG file for raylift_deploy: the DAG ships in the raylift package (raylift.dags.deploy)."""

from raylift.dags.deploy import dag  # noqa: F401  (the DAG processor keeps this file's top-level DAG)
