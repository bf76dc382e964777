"""raylift_deploy: model source -> benchmarked OpenAI-compatible endpoint on Ray Serve + vLLM.

check hardware profile -> build artifact -> stage model -> acquire the cluster's lease -> scale cluster -> wait ready
-> deploy (a changed app as a canary beside the serving one) -> smoke test -> benchmark (the canary and the serving app in the same
rounds) -> gate (raylift.release decides) -> [approve_release, when held] -> promote, or rollback -> run record
-> release the lease.
All logic lives in the raylift package; the cluster_conn_id Param (or target) picks the cluster. Runs of different
clusters go side by side; runs of one cluster are serialised by its writer lease, not by max_active_runs.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, chain

from raylift.dag_params import deploy_params
from raylift.operators.approval import ReleaseApprovalOperator
from raylift.operators.benchmark import BenchmarkOperator
from raylift.operators.build import BuildArtifactOperator
from raylift.operators.cluster import ScaleClusterOperator
from raylift.operators.deploy import ServeDeployOperator
from raylift.operators.gate import ReleaseGateOperator
from raylift.operators.guard import RollbackUnprovenOperator
from raylift.operators.lease import AcquireClusterLeaseSensor, ReleaseClusterLeaseOperator
from raylift.operators.profile import HardwareProfileOperator
from raylift.operators.promote import PromoteReleaseOperator
from raylift.operators.record import FailRunIfAnyFailedOperator, RunRecordOperator
from raylift.operators.smoke import SmokeTestOperator
from raylift.operators.stage import StageModelOperator
from raylift.sensors.cluster import RayClusterReadySensor

TARGET = {
    "target": "{{ params.target }}",
    "target_options": "{{ params.target_options }}",
    "cluster_conn_id": "{{ params.cluster_conn_id | pprint }}",
}

with DAG(
    dag_id="raylift_deploy",
    description="Deploy an LLM on Ray Serve + vLLM, smoke-test and benchmark it",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=8,
    render_template_as_native_obj=True,
    params=deploy_params(),
    tags=["raylift"],
    doc_md=__doc__,
) as dag:
    # first: a profile the cluster's instances cannot run is refused before an image build or a node starts
    profile = HardwareProfileOperator(task_id="check_hardware_profile", serve_config="{{ params.serve_config }}",
                                      **TARGET)
    # the steps after it build, roll out and render the image it chose
    IMAGE = {**TARGET, "chosen_profile": profile.output}
    build = BuildArtifactOperator(task_id="build_artifact", **IMAGE)
    stage = StageModelOperator(
        task_id="stage_model",
        model_source="{{ params.model_source | pprint }}",
        model_id="{{ params.model_id | pprint }}",
        revision="{{ params.revision | pprint }}",
        allow_patterns="{{ params.hub_allow_patterns }}",
        ignore_patterns="{{ params.hub_ignore_patterns }}",
        **IMAGE,
    )
    acquire = AcquireClusterLeaseSensor(task_id="acquire_cluster_lease", **TARGET)
    # the tasks between acquire_cluster_lease and release_cluster_lease: they renew the run's lease and write under it
    RELEASE = {**IMAGE, "holds_release_lease": True, "release_lease": acquire.output}
    scale = ScaleClusterOperator(task_id="scale_cluster", workers="{{ params.workers }}",
                                 release="{{ params.release }}", **RELEASE)
    ready = RayClusterReadySensor(task_id="wait_cluster_ready", expectation=scale.output, **TARGET)
    deploy = ServeDeployOperator(
        task_id="deploy",
        artifact=build.output,
        model=stage.output,
        app_name="{{ params.app_name | pprint }}",
        serve_config="{{ params.serve_config }}",
        served_name="{{ params.served_name | pprint }}",
        replicas="{{ params.replicas }}",
        engine_args="{{ params.engine_args }}",
        app_args="{{ params.app_args }}",
        autoscaling="{{ params.autoscaling }}",
        route_prefix="{{ params.route_prefix }}",
        surge_replicas="{{ params.surge_replicas }}",
        release="{{ params.release }}",
        timeout_s="{{ params.deploy_timeout_s }}",
        **RELEASE,
    )
    smoke = SmokeTestOperator(
        task_id="smoke_test",
        deployed=deploy.output,  # where the candidate answers, and the name it is served by
        app_name="{{ params.app_name | pprint }}",
        **RELEASE,
    )
    benchmark = BenchmarkOperator(
        task_id="benchmark",
        deployed=deploy.output,
        app_name="{{ params.app_name | pprint }}",
        profile="{{ params.benchmark_profile }}",
        concurrency="{{ params.concurrency }}",
        requests_per_level="{{ params.requests_per_level }}",
        max_seconds_per_level="{{ params.max_seconds_per_level }}",
        warmup_requests="{{ params.warmup_requests }}",
        cost="{{ params.cost }}",
        sweep="{{ params.sweep }}",
        slos="{{ params.slos }}",
        **RELEASE,
    )
    gate = ReleaseGateOperator(
        task_id="gate",
        app_name="{{ params.app_name | pprint }}",
        deployed=deploy.output,
        benchmark=benchmark.output,
        slos="{{ params.slos }}",
        max_regression="{{ params.max_regression }}",
        regression_confidence="{{ params.regression_confidence }}",
        on_inconclusive="{{ params.on_inconclusive }}",
        max_cumulative_regression="{{ params.max_cumulative_regression }}",
        regression_baseline="{{ params.regression_baseline }}",
        approval="{{ params.approval }}",
        **RELEASE,
    )
    # only when the gate holds the release
    approve = ReleaseApprovalOperator(task_id="approve_release", decision=gate.output["decision"], **IMAGE)
    promote = PromoteReleaseOperator(
        task_id="promote",
        app_name="{{ params.app_name | pprint }}",
        deployed=deploy.output,
        decision=gate.output["decision"],
        approval=approve.output,  # None unless the gate held the release and a person approved it
        surge_replicas="{{ params.surge_replicas }}",
        timeout_s="{{ params.deploy_timeout_s }}",
        **RELEASE,
    )
    record = RunRecordOperator(
        task_id="run_record",
        parts={
            "artifact": build.output,
            "model": stage.output,
            "deployed": deploy.output,
            "smoke": smoke.output,
            "benchmark": benchmark.output,
            "promote": promote.output,
        },
        **IMAGE,  # writes the run's record, not the cluster: outside the lease (it also records a run that never got it)
    )
    # runs when a step failed or the release was rejected (the gate or the approval fails, so promote is
    # upstream_failed): removes the canary, restores the app if this run's config is still serving
    rollback = RollbackUnprovenOperator(task_id="rollback", app_name="{{ params.app_name | pprint }}", **RELEASE)
    release = ReleaseClusterLeaseOperator(task_id="release_cluster_lease", **IMAGE)
    chain(profile, build, stage, acquire, scale, ready, deploy, smoke, benchmark, gate)
    gate >> [approve, promote]  # the gate follows one: promote, or approve_release (held)
    approve >> promote
    [deploy, smoke, benchmark, promote] >> rollback
    [promote, rollback] >> record
    [record, rollback] >> release  # all_done: whatever happened
    every_step = [profile, build, stage, acquire, scale, ready, deploy, smoke, benchmark, gate, approve, promote,
                  record, rollback, release]
    every_step >> FailRunIfAnyFailedOperator(task_id="fail_run_if_any_failed")
