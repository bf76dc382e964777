"""Write the run record: one JSON with the lineage of a deploy, from artifact to benchmark."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperator

from raylift.operators.base import TargetOperator


class RunRecordOperator(TargetOperator):
    """Runs even when an upstream task failed (trigger rule all_done), so failures leave a record too. When every
    step produced its result (the run passed), it also resumes the cluster's redeploys a teardown paused.

    :param parts: what goes into ``record.json``: the XComArgs of the artifact, model, deploy, smoke, benchmark and
        promote tasks (None where a task left nothing); the applied Serve config (the deploy's) and the release
        decision (the run's ``release.json``) are added."""

    template_fields = (*TargetOperator.template_fields, "parts")

    def __init__(self, *, parts: dict[str, Any], **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "all_done")
        super().__init__(**kwargs)
        self.parts = parts

    def execute(self, context: Any) -> str:
        from raylift.operators.redeploy import resume_redeploys
        from raylift.release.state import run_file
        from raylift.run_record import build_record
        from raylift.store import open_store

        target = self.target_impl
        if target.cluster_identity:  # the store of release state, as TargetOperator.state_for opens it
            store = target.state_store()
        else:
            store = open_store(target.state_uri(), aws_conn_id=self.target_options.get("aws_conn_id"))
        deployed = self.parts.get("deployed")
        config = deployed.get("serve_config") if isinstance(deployed, dict) else None
        record = build_record(
            run_id=context["run_id"],
            target=self.target,
            params=dict(context["params"]),
            # the release decision: the gate's, or the approval's answer to a held one (the run's release.json)
            parts={**self.parts, "release": store.read_json(run_file(context["run_id"], "release")),
                   "serve_config": config},
            triggered_at=getattr(context.get("dag_run"), "run_after", None),
        )
        timings = record["cold_start"]
        self.log.info(
            "cold start: trigger → RUNNING %s s, trigger → first token %s s",
            timings["trigger_to_running_s"], timings["trigger_to_first_token_s"],
        )
        key = run_file(context['run_id'], "record")
        store.write_json(key, record)
        uri = store.child_uri(key)
        self.log.info("run record written to %s", uri)
        if all(step == "done" for step in record["steps"].values()) and resume_redeploys(
            target.state_store(), target.cluster_key()
        ):
            self.log.info("this deploy passed: redeploys of %s resume (a teardown had paused them)",
                          target.cluster_key())
        return uri


class FailRunIfAnyFailedOperator(BaseOperator):
    """Leaf "watcher": runs only when an upstream task failed, and fails the DAG run.

    The run record runs with trigger rule all_done so failures are recorded too; without this watcher
    that successful leaf would mark a failed deploy's run as success.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trigger_rule", "one_failed")
        super().__init__(**kwargs)

    def execute(self, context: Any) -> None:
        from raylift.errors import RayliftError

        raise RayliftError("A pipeline step failed (see the failed task's log for the reason); the run fails.")
