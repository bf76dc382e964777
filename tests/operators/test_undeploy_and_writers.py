"""Undeploy one app (the others stay exactly as they were) and one writer per cluster (Serve REST stand-in)."""

from __future__ import annotations

import copy
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raylift.errors import DeployError, RayliftValueError
from raylift.lease import Lease
from raylift.release.writer import (
    ServeConfigConflictError,
    cluster_lease,
    cluster_lock,
    update_serve_config,
    write_serve_config,
)
from raylift.serve.config import merge_app
from raylift.targets.local import LocalTarget
from tests.fixtures.serve_standin import ServeStandin, serve_standin
from tests.operators.test_rollback_guard import Context, app_config, deploy_op

ROOT = Path(__file__).resolve().parents[2]


def named(name: str, prefix: str) -> dict[str, Any]:
    return app_config(f"/store/{name}") | {"name": name, "route_prefix": prefix}


@pytest.fixture()
def two_apps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServeStandin]:
    initial = {"proxy_location": "HeadOnly", "applications": [named("llm", "/"), named("chat", "/chat")]}
    with serve_standin(monkeypatch, tmp_path, initial) as standin:
        yield standin


def undeploy(app: str, timeout_s: float = 10, deferrable: bool = False) -> dict[str, Any]:
    from raylift.operators.cluster import UndeployAppOperator

    return UndeployAppOperator(task_id="undeploy_app", app_name=app, timeout_s=timeout_s,
                               deferrable=deferrable).execute({})


def test_undeploy_removes_one_app_and_keeps_the_other_as_it_was(two_apps: ServeStandin) -> None:
    chat = copy.deepcopy(two_apps.app("chat"))
    assert undeploy("llm") == {"app_name": "llm", "removed": True, "remaining": ["chat"]}
    assert two_apps.app("llm") is None and two_apps.app("chat") == chat
    assert two_apps.config["proxy_location"] == "HeadOnly"
    assert undeploy("llm") == {"app_name": "llm", "removed": False}  # idempotent
    assert len(two_apps.puts) == 1


def test_undeploy_waits_while_serve_lists_the_app_deleting(two_apps: ServeStandin) -> None:
    """Serve lists a removed app as DELETING while its replicas drain: the task ends once it is gone, and
    fails (naming the status) when the replicas never stop; the other app is untouched either way."""
    two_apps.deleting_polls = 3
    assert undeploy("llm") == {"app_name": "llm", "removed": True, "remaining": ["chat"]}
    assert not two_apps.deleting  # it waited through the DELETING polls
    two_apps.deleting_polls = None  # replicas that never stop
    with pytest.raises(DeployError, match=r"removed from the Serve config, but: .*not ready after 2s \(chat=DELETING\)"):
        undeploy("chat", timeout_s=2)
    assert two_apps.config["applications"] == []


def test_undeploy_defers_on_the_targets_removal_trigger(two_apps: ServeStandin) -> None:
    from airflow.sdk.exceptions import TaskDeferred

    from raylift.triggers.serve import ServeApplicationGoneTrigger

    with pytest.raises(TaskDeferred) as deferred:
        undeploy("llm", deferrable=True)
    trigger = deferred.value.trigger
    assert isinstance(trigger, ServeApplicationGoneTrigger) and trigger.app_names == ["llm"]
    assert trigger.dashboard_url == two_apps.url and deferred.value.kwargs == {"remaining": ["chat"]}


def test_the_undeploy_dag_names_its_app() -> None:
    sys.path.insert(0, str(ROOT / "dags"))
    import raylift_undeploy

    task = raylift_undeploy.dag.get_task("undeploy_app")
    assert task.app_name == "{{ params.app_name | pprint }}" and "app_name" in raylift_undeploy.dag.params


def test_a_write_built_on_a_stale_read_is_refused_naming_the_change(two_apps: ServeStandin) -> None:
    target = LocalTarget()
    read = target.current_serve_config()
    # another writer deploys a third app in between (a second app's deploy, a hand `serve deploy`)
    target.apply_serve_config(merge_app(read, named("embed", "/embed"), defaults=read))
    mine = merge_app(read, app_config("/store/new") | {"name": "llm"}, defaults=read)
    with pytest.raises(ServeConfigConflictError, match=r"app 'embed' added.*nothing was applied"):
        write_serve_config(target, mine, read=read)
    assert {a["name"] for a in two_apps.config["applications"]} == {"llm", "chat", "embed"}
    assert two_apps.app("llm")["args"]["model"] == "/store/llm"


def test_a_deploy_racing_another_writer_fails_naming_the_conflict_and_reverts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    initial = {"proxy_location": "HeadOnly", "applications": [app_config("/store/a")]}
    with serve_standin(monkeypatch, tmp_path, initial) as serve:
        import raylift.operators.deploy as deploy_mod

        real_check = deploy_mod.ServeDeployOperator.check_fit

        def check_then_other_writer(self: Any, app: dict, current: dict) -> None:
            real_check(self, app, current)  # while this deploy validates, another app is deployed (once, onto
            # what the cluster runs: the later fit checks of the canary and its baseline see hypothetical configs)
            live = LocalTarget().current_serve_config()
            if not any(a["name"] == "chat" for a in live["applications"]):
                LocalTarget().apply_serve_config(merge_app(live, named("chat", "/chat"), defaults=live))

        monkeypatch.setattr(deploy_mod.ServeDeployOperator, "check_fit", check_then_other_writer)
        with pytest.raises(ServeConfigConflictError, match="app 'chat' added"):
            deploy_op("/store/b").execute(Context("r1"))
        assert {a["name"] for a in serve.config["applications"]} == {"translator", "chat"}
        assert serve.app("translator")["args"]["model"] == "/store/a"
        # and the rollback guard does not undo the other writer's app either
        from tests.operators.test_rollback_guard import guard

        assert "nothing to roll back" in guard().execute({"run_id": "r1"})
        assert serve.app("chat") is not None


def test_writers_take_turns_on_the_cluster_lock_so_both_apps_stay(two_apps: ServeStandin) -> None:
    target = LocalTarget()
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def slow_writer() -> None:
        def change(current: dict) -> dict:
            inside.set()
            release.wait(10)
            order.append("first")
            return merge_app(current, named("a1", "/a1"), defaults=current)

        update_serve_config(target, change)

    t = threading.Thread(target=slow_writer)
    t.start()
    inside.wait(10)
    second = threading.Thread(target=lambda: (update_serve_config(
        target, lambda cur: (order.append("second"), merge_app(cur, named("a2", "/a2"), defaults=cur))[1])))
    second.start()
    second.join(0.5)
    assert second.is_alive() and order == []  # waits for the lock
    release.set()
    t.join(10)
    second.join(10)
    assert order == ["first", "second"]
    assert {a["name"] for a in two_apps.config["applications"]} == {"llm", "chat", "a1", "a2"}


def test_a_stuck_lock_holder_is_named_after_the_wait(two_apps: ServeStandin) -> None:
    target = LocalTarget()
    with cluster_lock(target):
        failed: list[Exception] = []

        def other() -> None:
            try:
                with cluster_lock(target, wait_s=0.5):
                    pass
            except ServeConfigConflictError as exc:
                failed.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join(5)
    assert failed and "held the Serve config lock" in str(failed[0])


def test_a_step_holding_the_lease_writes_inside_it_and_a_lost_lease_writes_nothing(
    two_apps: ServeStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that holds the cluster's lease (a whole release span) passes it in: no wait on itself. The
    fencing check runs right before the PUT: a lease taken over meanwhile (this step paused past its expiry)
    or already released applies nothing."""
    import raylift.release.writer

    monkeypatch.setattr(raylift.release.writer, "LOCK_WAIT_S", 2.0)  # waiting on itself fails fast, not in 5 min
    target = LocalTarget()
    with cluster_lock(target, wait_s=2) as lease:
        update_serve_config(target, lambda cur: merge_app(cur, named("a1", "/a1"), defaults=cur), lease=lease)
        read = target.current_serve_config()
        write_serve_config(target, merge_app(read, named("a2", "/a2"), defaults=read), read=read, lease=lease)
        with cluster_lock(target, lease=lease) as inner:
            assert inner == lease

    def taken_over_meanwhile(mine: Lease) -> Callable[[dict], dict]:
        def change(current: dict) -> dict:
            leases = cluster_lease(target)
            leases.release(mine)  # as if it had expired while this step was paused
            leases.acquire("another-worker", ttl_s=60, wait_s=0)
            return merge_app(current, named("a3", "/a3"), defaults=current)

        return change

    with cluster_lock(target, wait_s=2) as mine:
        with pytest.raises(ServeConfigConflictError, match="no longer holds the cluster's writer lease.*another-worker"):
            update_serve_config(target, taken_over_meanwhile(mine), lease=mine)
    with pytest.raises(ServeConfigConflictError, match="no longer holds the cluster's writer lease"):
        update_serve_config(target, lambda cur: merge_app(cur, named("a4", "/a4"), defaults=cur), lease=lease)
    assert {a["name"] for a in two_apps.config["applications"]} == {"llm", "chat", "a1", "a2"}
    assert len(two_apps.puts) == 2



def test_a_code_update_whose_surge_does_not_fit_is_refused_before_anything_is_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from raylift.errors import ServeFitError

    # a direct release: the update rolls out in the app itself (a canary's room: tests/operators/test_canary_release.py)
    initial = {"proxy_location": "HeadOnly", "applications": [app_config("/store/a")]}
    with serve_standin(monkeypatch, tmp_path, initial) as serve:
        serve.cpus = 0.5  # room for the one 0.5-CPU replica, not for a second beside it
        with pytest.raises(ServeFitError, match=r"CPU.*surge replica.*set the surge_replicas Param to 0"):
            deploy_op("/store/b", release="direct").execute(Context("r1"))
        assert serve.puts == [] and serve.app("translator")["args"]["model"] == "/store/a"
        # the Param the refusal names: stop-before-start, applied as the config itself (no surge), said to go dark
        capsys.readouterr()
        assert deploy_op("/store/b", surge_replicas=0, release="direct").execute(Context("r0"))["app_name"] == "translator"
        logged = capsys.readouterr().out  # the task log (Airflow's structlog writes it to stdout here)
        assert [p["applications"][0]["deployments"][0]["num_replicas"] for p in serve.puts] == [1]
        assert "stop-before-start" in logged and "no serving replica" in logged
        assert re.search(r"was dark \(or short of replicas\) for up to \d+ s", logged), logged
        with pytest.raises(RayliftValueError, match="'surge_replicas' must be >= 0"):
            deploy_op("/store/c", surge_replicas=-1, release="direct").execute(Context("r-1"))
        serve.config["applications"][0]["args"]["model"] = "/store/a"  # back to A for the start-before-stop case
        serve.puts.clear()
        serve.cpus = 1.0  # with room for the surge it deploys
        assert deploy_op("/store/b", release="direct").execute(Context("r2"))["app_name"] == "translator"
        assert serve.app("translator")["args"]["model"] == "/store/b"
