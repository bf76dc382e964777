"""One multi-worker Airflow (Postgres, Redis, CeleryExecutor, two workers) for this package's tests, and two Ray
clusters it deploys to as two raylift_cluster connections (``dev``, ``prod``).

Package-scoped: started once, stopped when this package's tests end (the fixture then checks that no process
it started is left). Its DAGs folder holds raylift's DAGs and the test DAGs of ``dags/`` here. The connections
are Airflow's own (``AIRFLOW_CONN_*`` in every component's environment, as a secrets backend would serve them);
both clusters keep their models, release state and writer lease in ONE store both workers see (as dev and prod
sharing a bucket do): what keeps their state apart is the cluster's identity, not the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.celery_stack import CeleryStack, celery_airflow
from tests.multiworker.ray_clusters import RayHead, ray_clusters

TEST_DAGS = sorted((Path(__file__).parent / "dags").glob("*.py"))
# a task whose worker was SIGKILLed is found by the scheduler after this long, then retried on a live worker
STACK_ENV = {
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
    "AIRFLOW__CORE__DEFAULT_TASK_RETRIES": "1",
    "AIRFLOW__CORE__DEFAULT_TASK_RETRY_DELAY": "5",
    "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "False",  # the deploy waits in its worker: a kill lands mid-deploy
    "AIRFLOW_VAR_RAYLIFT_REDEPLOY_CLUSTERS": '["dev", "prod"]',
}


@pytest.fixture(scope="package")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, RayHead]]:
    with ray_clusters(tmp_path_factory.mktemp("ray-clusters")) as heads:
        yield heads


@pytest.fixture(scope="package")
def celery_stack(tmp_path_factory: pytest.TempPathFactory, clusters: dict[str, RayHead]) -> Iterator[CeleryStack]:
    home = tmp_path_factory.mktemp("multiworker")
    store = home / "shared" / "store"
    env = {**STACK_ENV, **{f"AIRFLOW_CONN_{name.upper()}": head.connection(store) for name, head in clusters.items()}}
    with celery_airflow(home, dag_files=TEST_DAGS, extra_env=env) as stack:
        yield stack
