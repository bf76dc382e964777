"""Every failure after a config is applied rolls back, whatever raised (Serve REST stand-in, real operators).

The rollback lives in one step, the DAG's ``rollback`` (``one_failed``: ``raylift.release.rollback.undo_release``): a
failed deploy, smoke test or gate only fails its task, and that step puts back what the run replaced.

The stand-in keeps the Serve config as Serve's REST API would; the operators and the local target run
unchanged against it, with the state store in a temp RAYLIFT_HOME.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raylift.errors import SmokeTestError
from raylift.release.state import DeploymentState
from raylift.store import LocalStore
from tests.fixtures.http_standin import JsonHandler, serve_http
from tests.fixtures.serve_standin import ServeStandin, serve_standin

ROOT = Path(__file__).resolve().parents[2]
APP = "translator"


def app_config(model: str, replicas: int = 1, served: str = "tiny-t5") -> dict[str, Any]:
    return {
        "name": APP, "route_prefix": "/", "import_path": "translator.app:build_app",
        "runtime_env": {"working_dir": "file:///tmp/a.zip"},
        "args": {"model": model, "served_model_name": served},
        "deployments": [{"name": "Translator", "num_replicas": replicas, "ray_actor_options": {"num_cpus": 0.5}}],
    }


def whole(app: dict[str, Any]) -> dict[str, Any]:
    return {"proxy_location": "HeadOnly", "applications": [app]}


@pytest.fixture()
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServeStandin]:
    with serve_standin(monkeypatch, tmp_path, whole(app_config("/store/a"))) as standin:
        yield standin


def state(tmp_path: Path) -> DeploymentState:
    return DeploymentState(LocalStore(tmp_path / "model-store"), "local", APP)


def guard() -> Any:
    from raylift.operators.guard import RollbackUnprovenOperator

    return RollbackUnprovenOperator(task_id="rollback", app_name=APP)


def apply_as_run(serve: ServeStandin, tmp_path: Path, run_id: str, config: dict[str, Any]) -> None:
    """What the deploy step does: record the snapshot + what it applies, then PUT."""
    from raylift.targets.local import LocalTarget

    state(tmp_path).begin_apply(run_id, copy.deepcopy(serve.config), config)
    LocalTarget().apply_serve_config(config)


def test_a_benchmark_exception_after_apply_is_rolled_back_to_the_last_good(serve: ServeStandin, tmp_path: Path) -> None:
    good = copy.deepcopy(serve.config)
    state(tmp_path).record_good("r0", good)
    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/b")))
    # the benchmark raised (not a gate): nothing rolled back yet; the guard runs on one_failed
    action = guard().execute({"run_id": "r1"})
    assert "restored app 'translator' from the last good config (run r0)" in action, action
    assert serve.app(APP) == restored(good)
    # idempotent: a second guard (or a gate that already rolled back) changes nothing
    puts = len(serve.puts)
    assert "nothing to roll back" in guard().execute({"run_id": "r1"})
    assert len(serve.puts) == puts


def test_a_proven_run_and_a_run_that_applied_nothing_are_left_alone(serve: ServeStandin, tmp_path: Path) -> None:
    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/b")))
    state(tmp_path).record_good("r1", serve.config)
    assert "passed its gates" in guard().execute({"run_id": "r1"})
    assert "applied no config" in guard().execute({"run_id": "r2"})
    assert serve.app(APP)["args"]["model"] == "/store/b"


def test_an_app_changed_by_someone_else_since_is_not_reverted(serve: ServeStandin, tmp_path: Path) -> None:
    state(tmp_path).record_good("r0", copy.deepcopy(serve.config))
    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/b")))
    from raylift.targets.local import LocalTarget

    LocalTarget().apply_serve_config(whole(app_config("/store/c")))  # another writer, after r1
    assert "not rolled back: app 'translator' runs another version than run r1 wrote" in guard().execute({"run_id": "r1"})
    assert serve.app(APP)["args"]["model"] == "/store/c"


def test_a_changed_served_name_that_failed_later_is_rolled_back(serve: ServeStandin, tmp_path: Path) -> None:
    good = copy.deepcopy(serve.config)
    state(tmp_path).record_good("r0", good)
    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/a", served="renamed")))
    assert "restored app" in guard().execute({"run_id": "r1"})
    assert serve.app(APP)["args"]["served_model_name"] == "tiny-t5"
    # the next deploy is not wedged by r1: it applies, is recorded good, and the guard leaves it
    apply_as_run(serve, tmp_path, "r2", whole(app_config("/store/a", served="renamed")))
    state(tmp_path).record_good("r2", serve.config)
    assert "passed its gates" in guard().execute({"run_id": "r2"})
    assert serve.app(APP)["args"]["served_model_name"] == "renamed"


@pytest.fixture()
def non_json_app() -> Iterator[str]:
    """An app that answers 200 with an HTML page instead of the OpenAI JSON."""

    class Html(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b"<html>maintenance</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

    with serve_http(Html) as port:
        yield f"http://127.0.0.1:{port}"


def test_a_non_json_smoke_answer_fails_the_smoke_test_and_the_rollback_step_restores(
    serve: ServeStandin, tmp_path: Path, non_json_app: str
) -> None:
    from raylift.operators.smoke import SmokeTestOperator

    good = copy.deepcopy(serve.config)
    state(tmp_path).record_good("r0", good)
    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/b")))
    smoke = SmokeTestOperator(task_id="smoke_test", served_name="tiny-llama", app_name=APP,
                              deployed={"endpoint": non_json_app, "kind": "llm"})
    puts = len(serve.puts)
    with pytest.raises(SmokeTestError, match="Smoke test failed: .*JSON") as failed:
        smoke.execute({"run_id": "r1"})
    assert "Rolled back" not in str(failed.value)  # the smoke test only fails its task...
    assert len(serve.puts) == puts and serve.app(APP)["args"]["model"] == "/store/b"
    # ...and the rollback step (one_failed) puts back what the run replaced
    assert "restored app 'translator' from the last good config (run r0)" in guard().execute({"run_id": "r1"})
    assert serve.app(APP) == restored(good)
    assert "nothing to roll back" in guard().execute({"run_id": "r1"})


def restored(good: dict) -> dict:
    """The last good app as a rollback puts it back: rolled out start-before-stop (Serve's max_surge_percent)."""
    from raylift.config import ROLLOUT_SURGE_REPLICAS
    from raylift.release.rollout import with_native_surge

    return with_native_surge(good["applications"][0], ROLLOUT_SURGE_REPLICAS)


def deploy_op(model: str, **kwargs: Any) -> Any:
    from raylift.operators.deploy import ServeDeployOperator

    return ServeDeployOperator(
        task_id="deploy", artifact={"digest": "d", "working_dir": "file:///tmp/a.zip"},
        model={"model_id": "m", "revision": "r", "uri": model, "manifest_uri": f"{model}/m.json"},
        served_name="tiny-t5", app_name=APP, serve_config="translator-cpu.yaml", replicas=1, deferrable=False,
        **kwargs,
    )


class Context(dict):
    """An Airflow context with an XCom-keeping task instance, enough for the deploy operator."""

    def __init__(self, run_id: str) -> None:
        xcoms: dict[str, Any] = {}

        class TI:
            def xcom_push(self, key: str, value: Any) -> None:
                xcoms[key] = value

            def xcom_pull(self, task_ids: str, key: str) -> Any:
                return xcoms.get(key)

        super().__init__(run_id=run_id, ti=TI())


def test_a_retried_deploy_after_its_worker_died_post_put_keeps_the_first_snapshot(
    serve: ServeStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from raylift.targets.local import LocalTarget

    before = copy.deepcopy(serve.config)
    died = []

    def die_after_put(self: LocalTarget, **kw: Any) -> Any:
        died.append(True)
        raise SystemExit("worker lost")  # the task process ends right after the PUT

    with monkeypatch.context() as m:
        m.setattr(LocalTarget, "deploy_trigger", die_after_put)
        with pytest.raises(SystemExit):
            deploy_op("/store/b", release="direct").execute(Context("r1"))
    assert died and serve.app(APP)["args"]["model"] == "/store/b"  # half-applied: new config, never proven
    # try 2: finishes the rollout; the snapshot is still what served before try 1, not the half-applied one
    result = deploy_op("/store/b", release="direct").execute(Context("r1"))
    assert result["app_name"] == APP and serve.app(APP)["args"]["model"] == "/store/b"
    assert state(tmp_path).pre_deploy("r1") == before
    # ...and a failure after it restores what served before the run (no last good yet)
    assert "from the config that was serving before this run" in guard().execute({"run_id": "r1"})
    assert serve.app(APP)["args"]["model"] == "/store/a"


def test_the_deploy_dag_runs_the_guard_after_any_failure_past_the_deploy() -> None:
    sys.path.insert(0, str(ROOT / "dags"))
    import raylift_deploy

    dag = raylift_deploy.dag
    task = dag.get_task("rollback")
    assert task.trigger_rule == "one_failed"
    # a failed gate or a rejected approval fails its task, so promote is upstream_failed: one_failed counts it
    assert {"deploy", "smoke_test", "benchmark", "promote"} <= task.upstream_task_ids
    # the gate's branch skips the one of its next steps it does not follow (never what follows promote)
    assert dag.get_task("gate").downstream_task_ids - {"fail_run_if_any_failed"} == {"promote", "approve_release"}
    assert "fail_run_if_any_failed" in dag.get_task("promote").downstream_task_ids
    assert {"gate", "approve_release"} <= dag.get_task("promote").upstream_task_ids
    assert dag.get_task("promote").trigger_rule == "none_failed_min_one_success"  # the gate skips approve_release
    assert {"rollback", "gate", "approve_release", "promote"} <= dag.get_task("fail_run_if_any_failed").upstream_task_ids
    assert {"rollback", "promote"} <= dag.get_task("run_record").upstream_task_ids


def test_a_hand_deploy_during_the_benchmark_survives_the_gate_failure(serve: ServeStandin, tmp_path: Path) -> None:
    """Rollback restores only while the app still runs what this run wrote: a hand `serve deploy` of another
    version made while the run benchmarked is kept, and the failing step names the change."""
    from raylift.release.rollback import undo_release
    from raylift.targets.local import LocalTarget

    state(tmp_path).record_good("r0", copy.deepcopy(serve.config))
    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/b")))
    LocalTarget().apply_serve_config(whole(app_config("/store/c")))  # by hand, while r1 benchmarks
    puts = len(serve.puts)
    outcome = undo_release(LocalTarget(), state(tmp_path), "r1", APP)
    assert outcome.startswith("not rolled back: app 'translator' runs another version than run r1 wrote"), outcome
    assert "args" in outcome  # names what changed
    assert serve.app(APP)["args"]["model"] == "/store/c" and len(serve.puts) == puts


def test_an_undeploy_during_the_run_is_not_undone_by_its_failure(serve: ServeStandin, tmp_path: Path) -> None:
    from raylift.release.rollback import undo_release
    from raylift.targets.local import LocalTarget

    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/b")))
    LocalTarget().apply_serve_config({"proxy_location": "HeadOnly", "applications": []})  # raylift_undeploy
    outcome = undo_release(LocalTarget(), state(tmp_path), "r1", APP)
    assert "was removed since run r1 wrote it" in outcome and serve.app(APP) is None


def test_rollback_restores_what_this_run_replaced_not_an_older_last_good(serve: ServeStandin, tmp_path: Path) -> None:
    """r0 passed with /store/a; /store/x was deployed by hand after it; r1 replaced /store/x and failed:
    what r1 replaced (/store/x) comes back, not r0's."""
    from raylift.release.rollback import undo_release
    from raylift.targets.local import LocalTarget

    state(tmp_path).record_good("r0", copy.deepcopy(serve.config))
    LocalTarget().apply_serve_config(whole(app_config("/store/x")))
    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/b")))
    outcome = undo_release(LocalTarget(), state(tmp_path), "r1", APP)
    assert "from the config that was serving before this run" in outcome, outcome
    assert serve.app(APP)["args"]["model"] == "/store/x"


@pytest.mark.parametrize("surge", [0, 1])
def test_a_full_cluster_rolls_back_stop_before_start_within_the_fit(
    serve: ServeStandin, tmp_path: Path, surge: int
) -> None:
    """2 replicas x 0.5 CPU on a 1-CPU cluster: no room for a surge replica. A surge_replicas 0 run goes back
    stop-before-start; a surge 1 run on this cluster does too (its surge would never schedule)."""
    from raylift.release.rollback import undo_release
    from raylift.targets.local import LocalTarget

    serve.cpus = 1.0
    LocalTarget().apply_serve_config(whole(app_config("/store/a", replicas=2)))
    state(tmp_path).record_good("r0", copy.deepcopy(serve.config))
    config = whole(app_config("/store/b", replicas=2))
    state(tmp_path).begin_apply("r1", copy.deepcopy(serve.config), config, surge=surge)
    LocalTarget().apply_serve_config(config)
    outcome = undo_release(LocalTarget(), state(tmp_path), "r1", APP)
    assert outcome.endswith("(stop-before-start)"), outcome
    back = serve.app(APP)
    assert back["args"]["model"] == "/store/a"
    assert all(not d.get("max_surge_percent") for d in back["deployments"]), back["deployments"]


def test_a_roomy_cluster_rolls_back_with_the_runs_surge(serve: ServeStandin, tmp_path: Path) -> None:
    from raylift.release.rollback import undo_release
    from raylift.targets.local import LocalTarget

    state(tmp_path).record_good("r0", copy.deepcopy(serve.config))
    config = whole(app_config("/store/b"))
    state(tmp_path).begin_apply("r1", copy.deepcopy(serve.config), config, surge=2)
    LocalTarget().apply_serve_config(config)
    outcome = undo_release(LocalTarget(), state(tmp_path), "r1", APP)
    assert "stop-before-start" not in outcome, outcome
    assert serve.app(APP)["deployments"][0]["max_surge_percent"] > 0


def test_the_rollback_waits_for_the_restored_app_as_long_as_the_runs_deploy_timeout(
        serve: ServeStandin, tmp_path: Path) -> None:
    """Issue 55 item 4: putting the old app back loads its model as slowly as the deploy did (a Neuron compile, a new
    node pulling the image), so the rollback waits the run's ``deploy_timeout_s``, recorded when it applied, not a
    fixed 600 s. Here the restored replicas never get scheduled: the wait ends at the run's 2 s and says so."""
    from raylift.release.rollback import undo_release
    from raylift.targets.local import LocalTarget

    LocalTarget().apply_serve_config(whole(app_config("/store/a")))
    state(tmp_path).record_good("r0", copy.deepcopy(serve.config))
    config = whole(app_config("/store/b"))
    state(tmp_path).begin_apply("r1", copy.deepcopy(serve.config), config, surge=1, timeout_s=2)
    LocalTarget().apply_serve_config(config)
    serve.unschedulable = {APP}
    outcome = undo_release(LocalTarget(), state(tmp_path), "r1", APP)
    assert "but it is not RUNNING yet" in outcome and "not ready after 2s" in outcome, outcome
    assert serve.app(APP)["args"]["model"] == "/store/a"  # what was written is the old app all the same


def test_a_hand_scale_up_during_a_direct_release_survives_its_rollback(serve: ServeStandin, tmp_path: Path) -> None:
    """Issue 45 item 5: rollback restores the app's release fields (model, args, code), not its replica count: a
    hand scale-up of the app (num_replicas in Serve's live config) since this run wrote it is kept."""
    from raylift.targets.local import LocalTarget

    LocalTarget().apply_serve_config(whole(app_config("/store/a", replicas=2)))
    state(tmp_path).record_good("r0", copy.deepcopy(serve.config))
    apply_as_run(serve, tmp_path, "r1", whole(app_config("/store/b", replicas=2)))
    LocalTarget().apply_serve_config(whole(app_config("/store/b", replicas=4)))  # someone scaled it up by hand
    action = guard().execute({"run_id": "r1"})
    assert "restored app 'translator'" in action, action
    assert serve.app(APP)["args"]["model"] == "/store/a"
    assert [d["num_replicas"] for d in serve.app(APP)["deployments"]] == [4]


def test_a_hand_scale_up_of_the_serving_app_during_a_canary_survives_its_rollback(
    serve: ServeStandin, tmp_path: Path
) -> None:
    """The canary borrowed one of the serving app's 3 replicas (2 while it ran); someone scaled the serving app to 5
    by hand meanwhile. The rollback removes the canary and keeps the 5 (it gives a lent replica back only to an app
    still at the lent count)."""
    from raylift.release.canary import CanaryPlan
    from raylift.targets.local import LocalTarget

    before, lent = app_config("/store/a", replicas=3), app_config("/store/a", replicas=2)
    canary = {**app_config("/store/b"), "name": f"{APP}-canary", "route_prefix": f"/_canary/{APP}"}
    plan = CanaryPlan(APP, app_config("/store/b", replicas=3), canary, lent, before, 1, 2)
    state(tmp_path).save_canary("r1", plan.as_dict())
    scaled = app_config("/store/a", replicas=5)
    LocalTarget().apply_serve_config({"proxy_location": "HeadOnly", "applications": [scaled, canary]})
    action = guard().execute({"run_id": "r1"})
    assert f"removed the canary app '{APP}-canary'" in action, action
    assert [a["name"] for a in serve.config["applications"]] == [APP]
    assert [d["num_replicas"] for d in serve.app(APP)["deployments"]] == [5]
