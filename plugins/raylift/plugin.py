"""Airflow plugin entry point (registered through the ``airflow.plugins`` entry point, not the plugins folder)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class RayliftPlugin(AirflowPlugin):
    name = "raylift"
