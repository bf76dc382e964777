"""raylift_teardown: scale the target to zero and stop what raylift started."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from raylift.dag_params import target_params
from raylift.operators.cluster import TeardownOperator

with DAG(
    dag_id="raylift_teardown",
    description="Scale the raylift cluster to zero and stop it",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    params=target_params(),
    tags=["raylift"],
    doc_md=__doc__,
) as dag:
    TeardownOperator(
        task_id="teardown",
        target="{{ params.target }}",
        target_options="{{ params.target_options }}",
        cluster_conn_id="{{ params.cluster_conn_id | pprint }}",
    )
