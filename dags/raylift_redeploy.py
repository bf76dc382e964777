"""raylift_redeploy: re-run the last good raylift_deploy on a cron, and whenever a model is staged.

Cron: ``raylift.config.redeploy_cron()`` (env ``AIRFLOW_VAR_RAYLIFT_REDEPLOY_CRON`` of the DAG processor, read
at parse time without querying the metadata store; default 03:00 UTC);
catchup=False, so unpausing runs at most the latest due redeploy, never a backlog.
Asset: the ``raylift-staged-model`` alias (StageModelOperator with that outlet, e.g. raylift_stage_model);
such a run deploys the announced model with the rest of the last good Params. The deploy itself is a
raylift_deploy run, so build, stage, gates, rollback and run record are the same, and raylift_deploy's
max_active_runs=1 keeps a redeploy from overlapping a manual deploy. While raylift_deploy is paused (a deploy
freeze), the redeploy's run of it waits queued until it is unpaused.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, AssetOrTimeSchedule, CronTriggerTimetable, chain

from raylift.assets import staged_model_alias
from raylift.config import DEPLOY_DAG_ID, redeploy_cron
from raylift.dag_params import deploy_params, target_params
from raylift.operators.redeploy import LastGoodConfOperator

with DAG(
    dag_id="raylift_redeploy",
    description="Re-run the last good raylift_deploy (with a newly staged model when one is announced)",
    schedule=AssetOrTimeSchedule(
        timetable=CronTriggerTimetable(redeploy_cron(), timezone="UTC"), assets=staged_model_alias()
    ),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params={**target_params(), "app_name": deploy_params()["app_name"]},
    tags=["raylift"],
    doc_md=__doc__,
) as dag:
    conf = LastGoodConfOperator(
        task_id="last_good_conf",
        target="{{ params.target }}",
        target_options="{{ params.target_options }}",
        cluster_conn_id="{{ params.cluster_conn_id }}",
        app_name="{{ params.app_name }}",
    )
    deploy = TriggerDagRunOperator(
        task_id="run_raylift_deploy",
        trigger_dag_id=DEPLOY_DAG_ID,
        trigger_run_id="redeploy__{{ run_id }}",
        conf=conf.output,
        wait_for_completion=True,  # deferred or in the worker per [operators] default_deferrable (True in raylift's)
        poke_interval=10,
        openlineage_inject_parent_info=False,
    )
    chain(conf, deploy)
