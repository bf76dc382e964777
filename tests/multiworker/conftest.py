"""One multi-worker Airflow (Postgres, Redis, CeleryExecutor, two workers) for this package's tests.

Package-scoped: started once, stopped when this package's tests end (the fixture then checks that no process
it started is left). Its DAGs folder holds raylift's DAGs and the test DAGs of ``dags/`` here.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.celery_stack import CeleryStack, celery_airflow

TEST_DAGS = sorted((Path(__file__).parent / "dags").glob("*.py"))


@pytest.fixture(scope="package")
def celery_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CeleryStack]:
    with celery_airflow(tmp_path_factory.mktemp("multiworker"), dag_files=TEST_DAGS) as stack:
        yield stack
