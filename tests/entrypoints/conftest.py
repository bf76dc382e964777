"""One real Airflow for every entry-point test, and one real deploy (shared by the tests that need it).

Package-scoped: both are stopped (Airflow's process group, the Ray cluster) when this package's tests end,
so nothing idles through the rest of the suite.

Ports 26000-26999 (this suite's range; outside Ray's worker ports). The cron Variable is overridden through
Airflow's env secrets backend with a leap-day cron: it proves the override path and cannot fire while the
suite runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.airflow_server import AirflowServer, running_airflow
from tests.integration.test_local_pipeline import conf

# another base (RAYLIFT_ENTRYPOINTS_PORT_BASE) lets one test run here beside a whole suite in another checkout
PORT_BASE = int(os.environ.get("RAYLIFT_ENTRYPOINTS_PORT_BASE", "26000"))
TEST_REDEPLOY_CRON = "0 4 29 2 *"
DEPLOY_RUN_ID = "rest_api_deploy"
# raylift_deploy itself waits up to 600 s for RUNNING; vLLM starts in minutes on a busy 2-core box.
DEPLOY_TIMEOUT_S = 840
DAG_IDS = ["raylift_deploy", "raylift_redeploy", "raylift_stage_model", "raylift_teardown"]


def deploy_conf(**overrides: Any) -> dict[str, Any]:
    """The integration test's tiny-model conf on target local: head only (the replica fits), less load."""
    small = {"target": "local", "workers": 0, "concurrency": [1, 2], "requests_per_level": 4,
             # not about the release gate: applied directly, held to the SLOs only (4 requests cannot be judged)
             "release": "direct", "regression_baseline": "none"}
    return conf(**(small | overrides))


@pytest.fixture(scope="package")
def airflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowServer]:
    home = tmp_path_factory.mktemp("entrypoints")
    with running_airflow(
        home, port_base=PORT_BASE, extra_env={"AIRFLOW_VAR_RAYLIFT_REDEPLOY_CRON": TEST_REDEPLOY_CRON}
    ) as server:
        server.wait_dags(DAG_IDS)
        server.unpause("raylift_deploy")
        yield server


@pytest.fixture(scope="package")
def deployed(airflow: AirflowServer) -> dict[str, Any]:
    """The one real deploy: raylift_deploy triggered through the REST API and polled to its end."""
    resp = airflow.trigger("raylift_deploy", deploy_conf(), run_id=DEPLOY_RUN_ID)
    assert resp.status_code == 200, resp.text
    run = airflow.wait_run("raylift_deploy", DEPLOY_RUN_ID, timeout_s=DEPLOY_TIMEOUT_S)
    assert run["state"] == "success", airflow.failure_report("raylift_deploy", DEPLOY_RUN_ID)
    return run
