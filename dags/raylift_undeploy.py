"""Airflow DAG file for raylift_undeploy: the DAG ships in the raylift package (raylift.dags.undeploy)."""

from raylift.dags.undeploy import dag  # noqa: F401  (the DAG processor keeps this file's top-level DAG)
