"""raylift_stage_model: stage a model into the model store and announce it (starts raylift_redeploy).

For publishing a new model (revision) without deploying it here: the staged-model Asset event makes
raylift_redeploy deploy it with the last good Params.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG

from raylift.assets import staged_model_alias
from raylift.dag_params import deploy_params, target_params
from raylift.operators.stage import StageModelOperator

_deploy = deploy_params()

with DAG(
    dag_id="raylift_stage_model",
    description="Stage a model into the model store and announce it as the staged-model Asset",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    render_template_as_native_obj=True,
    params={**target_params(), **{k: _deploy[k] for k in ("model_source", "model_id", "revision", "hub_allow_patterns", "hub_ignore_patterns")}},
    tags=["raylift"],
    doc_md=__doc__,
) as dag:
    StageModelOperator(
        task_id="stage_model",
        model_source="{{ params.model_source | pprint }}",
        model_id="{{ params.model_id | pprint }}",
        revision="{{ params.revision | pprint }}",
        allow_patterns="{{ params.hub_allow_patterns }}",
        ignore_patterns="{{ params.hub_ignore_patterns }}",
        target="{{ params.target }}",
        target_options="{{ params.target_options }}",
        cluster_conn_id="{{ params.cluster_conn_id | pprint }}",
        outlets=[staged_model_alias()],
    )
