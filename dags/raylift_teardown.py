"""Airflow DAG file for raylift_teardown: the DAG ships in the raylift package (raylift.dags.teardown)."""

from raylift.dags.teardown import dag  # noqa: F401  (the DAG processor keeps this file's top-level DAG)
