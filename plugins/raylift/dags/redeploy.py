"""raylift_redeploy: re-run the last good raylift_deploy of each cluster on a cron, and whenever a model is staged.

Clusters: the ``clusters`` Param, raylift_cluster connection ids (null: the connection-less target of the target
Params, local by default); its default is ``raylift.config.redeploy_clusters()`` (env
``AIRFLOW_VAR_RAYLIFT_REDEPLOY_CLUSTERS`` of the DAG processor, a JSON list; unset: ``[null]``). Each cluster is
one mapped ``last_good_conf`` task, which replays that cluster's own last good Params, or is skipped, naming why:
its connection has ``redeploy`` false, a raylift_teardown paused its redeploys (until a raylift_deploy on it
passes), it never passed a deploy, or the staged model that started this run lives in another cluster's store.
Each conf is one mapped ``run_raylift_deploy`` task (run id ``redeploy__<this run>__<cluster>``); one cluster's
failure does not hold back the others, and fails this run at the end.

Cron: ``raylift.config.redeploy_cron()`` (env ``AIRFLOW_VAR_RAYLIFT_REDEPLOY_CRON`` of the DAG processor, read
at parse time without querying the metadata store; default 03:00 UTC);
catchup=False, so unpausing runs at most the latest due redeploy, never a backlog.
Asset: the ``raylift-staged-model`` alias (StageModelOperator with that outlet, e.g. raylift_stage_model);
such a run deploys the announced model with the rest of the last good Params, on the clusters of its store. The
deploy itself is a raylift_deploy run, so build, stage, gates, rollback and run record are the same, and each
cluster's writer lease (not max_active_runs: raylift_deploy allows 8 runs, one per cluster) keeps a redeploy from
overlapping a manual deploy of the same cluster; a redeploy's gate never holds for a person (``on_inconclusive``
``raylift.config.SCHEDULED_ON_INCONCLUSIVE``). While raylift_deploy is paused (a deploy freeze), the redeploy's runs of it wait
queued until it is unpaused.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, TriggerRule, chain

from raylift.assets import staged_model_alias
from raylift.compat import cron_or_asset_schedule
from raylift.config import DEPLOY_DAG_ID, default_deferrable, redeploy_clusters, redeploy_cron
from raylift.dag_params import NAME_PATTERN, deploy_params, param, target_params
from raylift.operators.record import FailRunIfAnyFailedOperator
from raylift.operators.redeploy import LastGoodConfOperator, RedeployClustersOperator

TARGET = target_params()

with DAG(
    dag_id="raylift_redeploy",
    description="Re-run each cluster's last good raylift_deploy (with a newly staged model when one is announced)",
    schedule=cron_or_asset_schedule(redeploy_cron(), assets=staged_model_alias(), timezone="UTC"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    render_template_as_native_obj=True,
    params={
        "clusters": param(
            redeploy_clusters(), type="array", uniqueItems=True,
            items={"type": ["string", "null"], "pattern": NAME_PATTERN},
            description="The clusters to redeploy, by raylift_cluster connection id (each runs only if its connection "
            "has redeploy true); null: the connection-less target below (local by default). Default: env "
            "AIRFLOW_VAR_RAYLIFT_REDEPLOY_CLUSTERS of the DAG processor, else [null]",
        ),
        "target": TARGET["target"],
        "target_options": TARGET["target_options"],
        "app_name": deploy_params()["app_name"],
    },
    tags=["raylift"],
    doc_md=__doc__,
) as dag:
    clusters = RedeployClustersOperator(task_id="clusters", clusters="{{ params.clusters }}")
    confs = LastGoodConfOperator.partial(
        task_id="last_good_conf",
        target="{{ params.target }}",
        target_options="{{ params.target_options }}",
        app_name="{{ params.app_name | pprint }}",
        map_index_template="{{ task.cluster_conn_id or task.target }}",
    ).expand(cluster_conn_id=clusters.output)
    deploys = TriggerDagRunOperator.partial(
        task_id="run_raylift_deploy",
        trigger_dag_id=DEPLOY_DAG_ID,
        trigger_run_id="redeploy__{{ run_id }}__{{ task.conf.cluster_conn_id or task.conf.target }}",
        map_index_template="{{ task.conf.cluster_conn_id or task.conf.target }}",
        wait_for_completion=True,
        deferrable=default_deferrable(None),  # [operators] default_deferrable (True in raylift's Airflow)
        poke_interval=10,
        openlineage_inject_parent_info=False,
        trigger_rule=TriggerRule.ALL_DONE,  # the clusters that produced a conf, whatever happened to the others
    ).expand(conf=confs.output)
    chain(clusters, confs, deploys)
    [clusters, confs, deploys] >> FailRunIfAnyFailedOperator(task_id="fail_run_if_any_failed")
