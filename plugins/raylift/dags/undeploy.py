"""raylift_undeploy: remove one Serve application; the cluster and every other app keep running."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from raylift.config import DEFAULT_APP_NAME
from raylift.dag_params import NAME_PATTERN, param, target_params
from raylift.operators.cluster import UndeployAppOperator

with DAG(
    dag_id="raylift_undeploy",
    description="Remove one Serve application, keeping the cluster and the other apps",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    params={
        **target_params(),
        "app_name": param(DEFAULT_APP_NAME, type="string", pattern=NAME_PATTERN, description="Serve app to remove"),
    },
    tags=["raylift"],
    doc_md=__doc__,
) as dag:
    UndeployAppOperator(
        task_id="undeploy_app",
        app_name="{{ params.app_name | pprint }}",
        target="{{ params.target }}",
        target_options="{{ params.target_options }}",
        cluster_conn_id="{{ params.cluster_conn_id | pprint }}",
    )
