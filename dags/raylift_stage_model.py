"""Airflow DAG file for raylift_stage_model: the DAG ships in the raylift package (raylift.dags.stage_model)."""

from raylift.dags.stage_model import dag  # noqa: F401  (the DAG processor keeps this file's top-level DAG)
