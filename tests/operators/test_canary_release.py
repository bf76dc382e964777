"""A canary release on the Serve REST stand-in (tests/fixtures/serve_standin.py), real operators and local target.

A changed app runs as ``<app>-canary`` (1 replica, at ``/_canary/<app>``) beside the serving app, which is not
changed; promote turns the app into the candidate and removes the canary in one write; the rollback step
removes the canary (and gives back a replica the serving app lent). The decisions pushed here are
``raylift.release.decide``'s own; the gate that makes them is tested in test_benchmark_gates.py.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raylift.errors import RayliftValueError
from raylift.release.decision import ReleaseEvidence, decide
from raylift.release.state import DeploymentState
from raylift.store import LocalStore
from raylift.targets.local import LocalTarget
from tests.fixtures.serve_standin import ServeStandin, serve_standin
from tests.operators.test_benchmark_gates import XComs

APP, CANARY, BASELINE = "translator", "translator-canary", "translator-baseline"
FIRST = ReleaseEvidence(first_deploy=True, smoke_passed=True, slo_violations=(), judgement=None)
PASSED = ReleaseEvidence(first_deploy=False, smoke_passed=True, slo_violations=(),
                         judgement={"verdict": "pass", "metrics": []})


@pytest.fixture()
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServeStandin]:
    with serve_standin(monkeypatch, tmp_path, {"proxy_location": "HeadOnly", "applications": []}) as standin:
        yield standin


def state(tmp_path: Path) -> DeploymentState:
    return DeploymentState(LocalStore(tmp_path / "model-store"), "local", APP)


def deploy(model: str, run_id: str, xcoms: XComs, replicas: int = 1, **kwargs: Any) -> dict[str, Any]:
    """The deploy step of ``run_id`` (translator app, weights ``model``), waiting in the worker."""
    from raylift.operators.deploy import ServeDeployOperator

    op = ServeDeployOperator(
        task_id="deploy", artifact={"digest": "d", "working_dir": "file:///tmp/a.zip"},
        model={"model_id": "m", "revision": "r", "uri": model, "manifest_uri": f"{model}/m.json"},
        served_name="tiny-t5", app_name=APP, serve_config="translator-cpu.yaml", replicas=replicas,
        deferrable=False, **kwargs)
    return op.execute(xcoms.context(run_id, "deploy"))


def promote(run_id: str, xcoms: XComs, deployed: dict[str, Any], evidence: ReleaseEvidence = PASSED) -> Any:
    """The promote step after a gate whose decision is ``decide(evidence)``."""
    from raylift.operators.promote import PromoteReleaseOperator

    # the stand-in answers at once: 30 s is plenty, and a wait that never ends fails in 30 s, not Serve's 600
    op = PromoteReleaseOperator(task_id="promote", app_name=APP, deployed=deployed, decision=decide(evidence).as_dict(),
                                deferrable=False, timeout_s=30)
    return op.execute(xcoms.context(run_id, "promote"))


def rollback(run_id: str) -> str:
    from raylift.operators.guard import RollbackUnprovenOperator

    return RollbackUnprovenOperator(task_id="rollback", app_name=APP).execute({"run_id": run_id})


def first_release(model: str = "/store/a", replicas: int = 1) -> dict[str, Any]:
    """A first deploy of the app, promoted: what serves when the next release starts."""
    xcoms = XComs()
    out = deploy(model, "r1", xcoms, replicas=replicas)
    promote("r1", xcoms, out, FIRST)
    return out


def users_app(serve: ServeStandin, name: str, route: str) -> dict[str, Any]:
    """A user's own app (a copy of the serving one under ``name`` at ``route``), deployed beside it by hand."""
    theirs = copy.deepcopy(serve.app(APP))
    theirs.update(name=name, route_prefix=route)
    config = copy.deepcopy(serve.config)
    config["applications"].append(theirs)
    LocalTarget().apply_serve_config(config)
    return theirs


def names(serve: ServeStandin) -> list[str]:
    return [a["name"] for a in serve.config["applications"]]


def test_a_changed_app_starts_as_a_canary_beside_the_serving_app_which_stays_byte_identical(
    serve: ServeStandin, tmp_path: Path
) -> None:
    first_release()
    serving = json.dumps(serve.app(APP))
    puts = len(serve.puts)
    out = deploy("/store/b", "r2", XComs())
    assert out["release"] == "canary" and out["canary_app"] == CANARY and out["lent"] == 0, out
    assert out["route_prefix"] == "/_canary/translator" and out["endpoint"].endswith("/_canary/translator")
    assert out["baseline_scale"] == 1 and out["baseline_endpoint"] != out["endpoint"]
    # two writes: the canary first (the baseline never takes its room), then, once it is RUNNING, the baseline
    assert len(serve.puts) == puts + 2 and names(serve) == [APP, CANARY, BASELINE]
    assert [a["name"] for a in serve.puts[puts]["applications"]] == [APP, CANARY]
    assert json.dumps(serve.app(APP)) == serving  # users' app: not one byte changed
    canary = serve.app(CANARY)
    assert canary["args"]["model"] == "/store/b" and canary["route_prefix"] == "/_canary/translator"
    assert [d["num_replicas"] for d in canary["deployments"]] == [1]
    # the baseline arm: a fresh replica of the anchor's own config (r1's), beside the canary, no user traffic
    fresh = serve.app(BASELINE)
    assert fresh["args"]["model"] == "/store/a" and fresh["route_prefix"] == "/_baseline/translator"
    assert [d["num_replicas"] for d in fresh["deployments"]] == [1]
    assert out["baseline_endpoint"].endswith("/_baseline/translator") and out["baseline_runs"] == "fresh-anchor"
    assert state(tmp_path).canary("r2")["canary"]["name"] == CANARY  # saved before the write: rollback's plan


def test_promote_makes_the_app_the_candidate_and_removes_the_canary_in_one_write(
    serve: ServeStandin, tmp_path: Path
) -> None:
    first_release()
    xcoms = XComs()
    out = deploy("/store/b", "r2", xcoms)
    puts = len(serve.puts)
    done = promote("r2", xcoms, out)
    assert len(serve.puts) == puts + 1 and names(serve) == [APP]  # one write: canary and baseline gone, app rolled
    app = serve.app(APP)
    assert app["args"]["model"] == "/store/b" and app["route_prefix"] == "/"
    assert app["deployments"][0]["max_surge_percent"] > 0  # start-before-stop on the room the canary gave back
    assert done["promoted"] and state(tmp_path).last_good()["run_id"] == "r2"
    assert state(tmp_path).anchor()["run_id"] == "r2"
    # a proven run is not undone by a later rollback step (e.g. its run record failed)
    assert "passed its gates" in rollback("r2") and len(serve.puts) == puts + 1


def test_rollback_removes_the_canary_and_the_serving_app_is_untouched(serve: ServeStandin, tmp_path: Path) -> None:
    first_release()
    serving = json.dumps(serve.app(APP))
    deploy("/store/b", "r2", XComs())
    puts = len(serve.puts)
    action = rollback("r2")  # the gate rejected it (or smoke/benchmark failed): the rollback step runs
    assert "removed the canary app 'translator-canary'" in action and "gave" not in action, action
    assert "removed its fresh baseline app 'translator-baseline'" in action, action
    assert len(serve.puts) == puts + 1 and names(serve) == [APP]  # the fresh baseline replica went with it
    assert json.dumps(serve.app(APP)) == serving
    assert "already gone" in rollback("r2") and len(serve.puts) == puts + 1  # idempotent
    assert state(tmp_path).last_good()["run_id"] == "r1"


def test_a_full_cluster_lends_one_replica_of_a_two_replica_app_and_gets_it_back(
    serve: ServeStandin, tmp_path: Path
) -> None:
    serve.cpus = 1.0  # 2 replicas x 0.5 CPU: no room for a canary beside them
    first_release(replicas=2)
    serving = json.dumps(serve.app(APP))
    out = deploy("/store/b", "r2", XComs(), replicas=2)
    assert out["lent"] == 1 and out["baseline_scale"] == 1, out
    lent = serve.app(APP)
    assert lent["args"]["model"] == "/store/a" and [d["num_replicas"] for d in lent["deployments"]] == [1]
    assert [d["num_replicas"] for d in serve.app(CANARY)["deployments"]] == [1]
    action = rollback("r2")
    assert "gave app 'translator' its lent replica back" in action, action
    assert names(serve) == [APP] and serve.app(APP) == json.loads(serving)  # as it was (keys in the store's order)
    # the next release lends again; promoted, the app runs its 2 replicas of the candidate
    xcoms = XComs()
    out = deploy("/store/b", "r3", xcoms, replicas=2)
    assert out["lent"] == 1
    promote("r3", xcoms, out)
    app = serve.app(APP)
    assert names(serve) == [APP] and app["args"]["model"] == "/store/b"
    assert [d["num_replicas"] for d in app["deployments"]] == [2]
    assert not app["deployments"][0].get("max_surge_percent")  # no room for a surge: stop-before-start


def test_a_one_replica_app_on_a_full_cluster_is_refused_before_anything_is_applied(
    serve: ServeStandin, tmp_path: Path
) -> None:
    from raylift.release.canary import CanaryRoomError

    serve.cpus = 0.5  # room for the one 0.5-CPU replica, not for a canary beside it
    first_release()
    before, puts = copy.deepcopy(serve.config), len(serve.puts)
    with pytest.raises(CanaryRoomError, match=r"No room for a 1-replica canary of app 'translator'.*"
                       r"cluster has 0\.5, other apps hold 0\.5, so 0 are free.*it has 1 replica.*Nothing was "
                       r"applied.*'direct'"):
        deploy("/store/b", "r2", XComs())
    assert serve.config == before and len(serve.puts) == puts
    assert state(tmp_path).canary("r2") is None and state(tmp_path).applied("r2") is None


def test_a_first_deploy_and_release_direct_keep_the_direct_path(serve: ServeStandin, tmp_path: Path) -> None:
    out = first_release()
    assert out["release"] == "direct" and "canary_app" not in out and names(serve) == [APP]
    assert state(tmp_path).canary("r1") is None
    # a change that restarts no replica (replicas only) is applied to the app itself
    assert deploy("/store/a", "r2", XComs(), replicas=2)["release"] == "direct"
    assert names(serve) == [APP] and serve.app(APP)["deployments"][0]["num_replicas"] == 2
    # release 'direct': a code update goes to the app itself, no canary
    out = deploy("/store/b", "r3", XComs(), replicas=2, release="direct")
    assert out["release"] == "direct" and names(serve) == [APP] and serve.app(APP)["args"]["model"] == "/store/b"
    assert state(tmp_path).canary("r3") is None
    puts = len(serve.puts)
    with pytest.raises(RayliftValueError, match="'release' must be one of \\['canary', 'direct'\\], got 'blue-green'"):
        deploy("/store/c", "r4", XComs(), release="blue-green")
    assert len(serve.puts) == puts


def test_each_release_step_records_the_runs_deploy_timeout_for_its_rollback(serve: ServeStandin,
                                                                          tmp_path: Path) -> None:
    """The rollback step has no Params; it waits for the restored app as long as the run's ``deploy_timeout_s``,
    which the deploy (direct or canary) and the promote record with what they apply (issue 55 item 4)."""
    xcoms = XComs()
    deploy("/store/a", "r1", xcoms, timeout_s=1234)  # a first deploy: direct
    assert state(tmp_path).applied("r1")["timeout_s"] == 1234
    deployed = deploy("/store/b", "r2", xcoms, timeout_s=2345)  # a canary beside it
    assert deployed["release"] == "canary" and state(tmp_path).applied("r2")["timeout_s"] == 2345
    promote("r2", xcoms, deployed)  # its own timeout_s (30 s)
    assert state(tmp_path).applied("r2")["timeout_s"] == 30


def test_promote_refuses_when_the_serving_app_changed_meanwhile(serve: ServeStandin, tmp_path: Path) -> None:
    from raylift.operators.promote import ReleaseConflictError

    first_release()
    xcoms = XComs()
    out = deploy("/store/b", "r2", xcoms)
    by_hand = copy.deepcopy(serve.config)  # a hand `serve deploy` of another version while the canary is judged
    by_hand["applications"][0]["args"]["model"] = "/store/c"
    LocalTarget().apply_serve_config(by_hand)
    puts = len(serve.puts)
    with pytest.raises(ReleaseConflictError, match="app 'translator' runs another version since this run started"):
        promote("r2", xcoms, out)
    assert len(serve.puts) == puts and serve.config == by_hand
    assert state(tmp_path).last_good()["run_id"] == "r1"
    # the rollback step then removes the canary and keeps the hand change
    action = rollback("r2")
    assert "removed the canary app" in action and "runs another version than run r2 wrote (changed since: args" in action, action
    assert names(serve) == [APP] and serve.app(APP)["args"]["model"] == "/store/c"


def lost(self: LocalTarget, **kw: Any) -> Any:
    """The task's process ends right after its PUT (a lost worker), before the wait: Airflow retries it."""
    raise SystemExit("worker lost")


def test_a_retried_canary_deploy_keeps_its_plan_and_what_was_lent(serve: ServeStandin, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    serve.cpus = 1.0
    first_release(replicas=2)
    serving = json.dumps(serve.app(APP))
    with monkeypatch.context() as m:
        m.setattr(LocalTarget, "deploy_trigger", lost)
        with pytest.raises(SystemExit):
            deploy("/store/b", "r2", XComs(), replicas=2)
    assert serve.app(CANARY) and [d["num_replicas"] for d in serve.app(APP)["deployments"]] == [1]
    out = deploy("/store/b", "r2", XComs(), replicas=2)  # try 2: the app now runs 1 replica, lent to the canary
    assert out["lent"] == 1 and names(serve) == [APP, CANARY], out
    assert "gave app 'translator' its lent replica back" in rollback("r2")
    assert names(serve) == [APP] and serve.app(APP) == json.loads(serving)


def test_a_retried_promote_finishes_its_own_write(serve: ServeStandin, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    first_release()
    xcoms = XComs()
    out = deploy("/store/b", "r2", xcoms)
    with monkeypatch.context() as m:
        m.setattr(LocalTarget, "deploy_trigger", lost)
        with pytest.raises(SystemExit):
            promote("r2", xcoms, out)
    assert names(serve) == [APP] and serve.app(APP)["args"]["model"] == "/store/b"  # written, never recorded
    puts = len(serve.puts)
    # try 2 comes later than a second after try 1's write (Airflow retries after minutes): it waits for the deploy
    # try 1 started, not for one after its own start (seen failing: a 600 s wait on a RUNNING app, make test here)
    time.sleep(1.5)
    assert promote("r2", xcoms, out)["promoted"]  # try 2: no conflict with its own write, nothing written again
    assert len(serve.puts) == puts and state(tmp_path).last_good()["run_id"] == "r2"


def test_a_users_own_app_named_like_the_canary_is_never_overwritten_nor_removed(
    serve: ServeStandin, tmp_path: Path
) -> None:
    """Issue 45 item 5: a user's app named ``<app>-canary`` was overwritten by the canary, then deleted."""
    from raylift.release.canary import CanaryNameTakenError

    first_release()
    theirs = users_app(serve, CANARY, "/mine")
    before = json.dumps(serve.config)
    puts = len(serve.puts)
    with pytest.raises(CanaryNameTakenError, match="already runs on the cluster .* not this release's canary"):
        deploy("/store/b", "r2", XComs())
    assert len(serve.puts) == puts and json.dumps(serve.config) == before  # nothing applied
    rollback("r2")  # the rollback step after the failed deploy
    assert json.dumps(serve.app(CANARY)) == json.dumps(theirs) and names(serve) == [APP, CANARY]


def test_promote_keeps_a_hand_scale_up_of_the_serving_app_made_during_the_canary(
    serve: ServeStandin, tmp_path: Path
) -> None:
    """Issue 45 item 5: the serving app scaled by hand (1 -> 3) while the canary was judged was reverted to the
    release's 1 replica by promote. A replica count is not a version: promote goes on, and keeps the 3."""
    first_release()
    xcoms = XComs()
    out = deploy("/store/b", "r2", xcoms)
    by_hand = copy.deepcopy(serve.config)
    next(a for a in by_hand["applications"] if a["name"] == APP)["deployments"][0]["num_replicas"] = 3
    LocalTarget().apply_serve_config(by_hand)
    promote("r2", xcoms, out)
    app = serve.app(APP)
    assert names(serve) == [APP] and app["args"]["model"] == "/store/b"
    assert [d["num_replicas"] for d in app["deployments"]] == [3], app["deployments"]


def test_without_room_for_a_fresh_baseline_the_serving_app_is_the_baseline_arm_and_the_record_says_why(
    serve: ServeStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a target that gives the baseline no room of its own (ray, ecs, eks: only local chooses its logical resources)
    from raylift.targets.local import LocalTarget

    monkeypatch.delattr(LocalTarget, "baseline_arm_room")
    serve.cpus = 1.0  # the serving replica and the canary (0.5 CPU each), not a third
    first_release()
    out = deploy("/store/b", "r2", XComs())
    assert names(serve) == [APP, CANARY] and out["lent"] == 0
    assert out["baseline_runs"] == "serving" and out["baseline_app"] == APP and not out["baseline_endpoint"].endswith(
        "/_baseline/translator")
    assert "no room for a fresh baseline replica beside the canary" in out["baseline_note"]
    assert "cluster has 1" in out["baseline_note"], out["baseline_note"]


def test_a_users_app_named_like_the_baseline_is_left_alone(serve: ServeStandin, tmp_path: Path) -> None:
    first_release()
    theirs = users_app(serve, BASELINE, "/theirs")
    out = deploy("/store/b", "r2", XComs())
    assert out["baseline_runs"] == "serving" and "not this release's" in out["baseline_note"]
    assert json.dumps(serve.app(BASELINE)) == json.dumps(theirs)
    rollback("r2")
    assert sorted(names(serve)) == [APP, BASELINE] and json.dumps(serve.app(BASELINE)) == json.dumps(theirs)


def test_an_anchor_recorded_without_its_app_gets_a_fresh_replica_of_the_serving_config(
    serve: ServeStandin, tmp_path: Path
) -> None:
    first_release()
    anchor = state(tmp_path).anchor()
    assert anchor["app"]["args"]["model"] == "/store/a"  # promote records the anchor's own app entry
    state(tmp_path).write_anchor(anchor["run_id"], [0.02], anchor["benchmark"])  # as state from before
    out = deploy("/store/b", "r2", XComs())
    assert out["baseline_runs"] == "fresh-serving" and serve.app(BASELINE)["args"]["model"] == "/store/a"


def test_a_baseline_ray_cannot_place_is_removed_and_the_serving_app_is_the_baseline_arm(
    serve: ServeStandin, tmp_path: Path
) -> None:
    """The fit check counts what apps declare; Ray's scheduler decides (lane 2 of session 31: a baseline the fit
    check had room for was never placed). Serve's own "not scheduled" message ends the wait, not its timeout."""
    first_release()
    serving = json.dumps(serve.app(APP))
    serve.unschedulable = {BASELINE}
    started = time.monotonic()
    out = deploy("/store/b", "r2", XComs())
    assert time.monotonic() - started < 60  # Serve's message ended the wait (its bound is 120 s)
    assert names(serve) == [APP, CANARY] and json.dumps(serve.app(APP)) == serving
    assert out["baseline_runs"] == "serving" and out["baseline_app"] == APP and out["canary_app"] == CANARY
    assert "not RUNNING" in out["baseline_note"] and "to be scheduled" in out["baseline_note"], out["baseline_note"]
    assert state(tmp_path).canary("r2")["baseline_runs"] == "serving"  # the plan rollback and the gate read
    rollback("r2")
    assert names(serve) == [APP] and json.dumps(serve.app(APP)) == serving


def test_promote_counts_the_room_the_fresh_baseline_gives_back(serve: ServeStandin, tmp_path: Path) -> None:
    """Serving, canary and fresh baseline fill the cluster (0.5 CPU each of 1.5): the promote's one write removes
    the canary and the baseline, so its 2 start-before-stop surge replicas fit in what both give back."""
    from raylift.operators.promote import PromoteReleaseOperator

    serve.cpus = 1.5
    first_release()
    xcoms = XComs()
    out = deploy("/store/b", "r2", xcoms)
    assert out["baseline_runs"] == "fresh-anchor" and names(serve) == [APP, CANARY, BASELINE]
    PromoteReleaseOperator(task_id="promote", app_name=APP, deployed=out, decision=decide(PASSED).as_dict(),
                           deferrable=False, timeout_s=30, surge_replicas=2).execute(xcoms.context("r2", "promote"))
    app = serve.app(APP)
    assert names(serve) == [APP] and app["deployments"][0]["max_surge_percent"] > 0, app["deployments"]
