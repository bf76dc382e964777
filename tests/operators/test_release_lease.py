"""A release holds its cluster's writer lease from acquire_cluster_lease to release_cluster_lease: another run of
the same cluster waits, a run of another cluster does not, a task of a run that lost its lease writes nothing, and
the Serve writes inside the span are fenced by the run's lease. Stores are real folders (one per cluster, as the
connections say); the lease is the one every worker reads (raylift.lease)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from raylift.lease import LeaseLostError
from raylift.operators.lease import AcquireClusterLeaseSensor, ReleaseClusterLeaseOperator

APP = {"name": "llm", "import_path": "x:app", "route_prefix": "/"}


class TI:
    """A task instance that has no XCom to give: what a task needs from upstream it gets as an argument."""

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> Any:
        raise AssertionError(f"pulled {task_ids}/{key} by task id")


def context(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "dag_run": SimpleNamespace(dag_id="raylift_deploy"), "ti": TI()}


@pytest.fixture
def clusters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    stores = {}
    for n, name in enumerate(("dev", "prod")):
        stores[name] = tmp_path / name
        monkeypatch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps({"conn_type": "raylift_cluster", "extra": {
            "kind": "ray", "dashboard_url": f"http://127.0.0.1:{18265 + n}",
            "serve_url": f"http://127.0.0.1:{18000 + n}", "model_store": str(stores[name]),
        }}))
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    return stores


def acquire(conn: str, run_id: str) -> Any:
    sensor = AcquireClusterLeaseSensor(task_id="acquire_cluster_lease", cluster_conn_id=conn)
    return sensor.poke(context(run_id))


def test_one_release_per_cluster_and_the_next_waits(clusters: dict[str, Path]) -> None:
    a = acquire("dev", "run-a")
    assert a and a.xcom_value["holder"] == "raylift_deploy/run-a"
    assert acquire("dev", "run-b") is False  # same cluster: waits (the sensor pokes again)
    assert acquire("prod", "run-c")  # another cluster: not held up
    assert acquire("dev", "run-a")  # a retry of the holder's own task keeps it
    ReleaseClusterLeaseOperator(task_id="release_cluster_lease", cluster_conn_id="dev").execute(context("run-a"))
    b = acquire("dev", "run-b")
    assert b and b.xcom_value["token"] > a.xcom_value["token"]
    # releasing for a run that does not hold it leaves the holder's lease alone
    ReleaseClusterLeaseOperator(task_id="release_cluster_lease", cluster_conn_id="dev").execute(context("run-a"))
    assert acquire("dev", "run-x") is False


def test_a_task_of_a_run_that_lost_its_lease_writes_nothing(clusters: dict[str, Path]) -> None:
    from raylift.operators.guard import RollbackUnprovenOperator

    held = acquire("dev", "run-a").xcom_value
    ReleaseClusterLeaseOperator(task_id="release_cluster_lease", cluster_conn_id="dev").execute(context("run-a"))
    acquire("dev", "run-b")  # someone else took it in between
    guard = RollbackUnprovenOperator(task_id="rollback_if_unproven", app_name="llm", cluster_conn_id="dev",
                                     holds_release_lease=True, release_lease=held)
    with pytest.raises(LeaseLostError, match="no longer holds the writer lease .*held by raylift_deploy/run-b"):
        guard.pre_execute(context("run-a"))


def test_writes_inside_the_span_are_fenced_by_the_runs_lease(clusters: dict[str, Path]) -> None:
    """The deploy's Serve write takes no lease of its own inside a release (that would wait on the run's own
    lease) and refuses to write once the run's lease is gone."""
    from raylift.operators.deploy import ServeDeployOperator
    from raylift.release.writer import ServeConfigConflictError, cluster_lock

    held = acquire("dev", "run-a").xcom_value
    op = ServeDeployOperator(task_id="deploy", artifact={}, model={}, served_name="m", cluster_conn_id="dev",
                             holds_release_lease=True, release_lease=held)
    op.pre_execute(context("run-a"))
    target = op.target_impl
    assert target.held_lease is not None and target.held_lease.holder == "raylift_deploy/run-a"
    with cluster_lock(target, wait_s=1):  # re-entrant: the run's own lease, not a wait on it
        pass
    ReleaseClusterLeaseOperator(task_id="release_cluster_lease", cluster_conn_id="dev").execute(context("run-a"))
    acquire("dev", "run-b")
    with pytest.raises(ServeConfigConflictError), cluster_lock(target, wait_s=1):
        pass
    op.post_execute(context("run-a"))


def test_a_zombie_try_and_its_retry_do_not_share_a_fencing_token(clusters: dict[str, Path]) -> None:
    """Issue 57: a task whose worker lost its heartbeat (a zombie, still running) and the retry Airflow started in
    its place held one token, so the zombie's late writes landed over the retry's. Each task try of the release
    now takes the run's lease under a new token: the zombie's renewals stop and its writes are refused."""
    from raylift.lease import StaleWriteError
    from raylift.operators.guard import RollbackUnprovenOperator
    from raylift.release.writer import cluster_lease

    held = acquire("dev", "run-a").xcom_value
    tries = [RollbackUnprovenOperator(task_id="rollback", app_name="llm", cluster_conn_id="dev",
                                      holds_release_lease=True, release_lease=held) for _ in range(2)]
    zombie, retry = tries
    zombie.pre_execute(context("run-a"))  # try 1: its worker is lost, the task goes on
    retry.pre_execute(context("run-a"))   # try 2, on another worker
    old, new = zombie.target_impl.held_lease, retry.target_impl.held_lease
    assert old is not None and new is not None and new.token > old.token and new.holder == old.holder
    manager = cluster_lease(retry.target_impl)
    manager.fenced_write(new, "_raylift/probe.json", b'{"by": "retry"}')
    with pytest.raises((LeaseLostError, StaleWriteError)):
        manager.fenced_write(old, "_raylift/probe.json", b'{"by": "zombie"}')
    assert (clusters["dev"] / "_raylift/probe.json").read_bytes() == b'{"by": "retry"}'
    with pytest.raises(LeaseLostError):
        manager.renew(old, 60)  # the zombie's renewer stops at its next beat
    assert manager.current() is not None and manager.current().token == new.token  # type: ignore[union-attr]
    for op in tries:
        op.post_execute(context("run-a"))


def test_a_run_that_never_took_the_lease_is_told_so_not_failed(clusters: dict[str, Path]) -> None:
    from raylift.operators.guard import RollbackUnprovenOperator

    guard = RollbackUnprovenOperator(task_id="rollback_if_unproven", app_name="llm", cluster_conn_id="dev",
                                     holds_release_lease=True, release_lease=None)
    guard.pre_execute(context("run-a"))  # acquire_cluster_lease timed out: nothing of this run was written
    assert guard.target_impl.held_lease is None


def test_a_rollback_after_a_lost_lease_takes_it_again_when_it_is_free(clusters: dict[str, Path]) -> None:
    """Issue 45 item 4: the release's lease expired (a worker lost past the TTL) and nobody took it: the rollback,
    being the same run, takes it again and undoes the release, saying the lease was lost."""
    from raylift.operators.guard import RollbackUnprovenOperator

    held = acquire("dev", "run-a").xcom_value
    ReleaseClusterLeaseOperator(task_id="release_cluster_lease", cluster_conn_id="dev").execute(context("run-a"))
    guard = RollbackUnprovenOperator(task_id="rollback", app_name="llm", cluster_conn_id="dev",
                                     holds_release_lease=True, release_lease=held)
    guard.pre_execute(context("run-a"))
    lease = guard.target_impl.held_lease
    assert lease is not None and lease.holder == "raylift_deploy/run-a" and lease.token > held["token"]
    assert guard.lease_note and "lost its writer lease" in guard.lease_note
    guard.post_execute(context("run-a"))
    assert acquire("dev", "run-b") is False  # the run holds it until release_cluster_lease


def test_a_rollback_whose_lease_another_run_holds_leaves_a_named_hold(clusters: dict[str, Path]) -> None:
    """Another run took the lease: the rollback cannot write, so it leaves a hold record in the state store (who,
    which app, what is left up, what to run) and fails with the same message."""
    from raylift.operators.guard import RollbackHeldError, RollbackUnprovenOperator
    from raylift.release.state import DeploymentState
    from raylift.store import LocalStore

    held = acquire("dev", "run-a").xcom_value
    guard = RollbackUnprovenOperator(task_id="rollback", app_name="llm", cluster_conn_id="dev",
                                     holds_release_lease=True, release_lease=held)
    key = guard.target_impl.cluster_key()
    state = DeploymentState(LocalStore(clusters["dev"]), key, "llm")
    state.save_canary("run-a", {"canary": {"name": "llm-canary"}})
    ReleaseClusterLeaseOperator(task_id="release_cluster_lease", cluster_conn_id="dev").execute(context("run-a"))
    acquire("dev", "run-b")
    with pytest.raises(RollbackHeldError, match="held by raylift_deploy/run-b") as err:
        guard.pre_execute(context("run-a"))
    hold = state.hold("run-a")
    assert hold is not None and hold["holder"] == "raylift_deploy/run-b" and hold["app"] == "llm"
    assert "llm-canary" in " ".join(hold["left_up"]) and "clearTaskInstances" in hold["to_run"]
    assert hold["message"] == str(err.value)
