"""BuildArtifactOperator: whether it defers follows Airflow's ``[operators] default_deferrable``."""

from __future__ import annotations

import pytest

from raylift.operators.build import BuildArtifactOperator


def test_deferrable_defaults_to_airflow_config_read_at_creation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", raising=False)
    assert BuildArtifactOperator(task_id="build").deferrable is False  # Airflow's default
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "true")  # after import: read per task
    assert BuildArtifactOperator(task_id="build").deferrable is True
    assert BuildArtifactOperator(task_id="build", deferrable=False).deferrable is False
