"""BenchmarkOperator's gates cannot be bypassed: against the stub OpenAI server, with the state in a
real local model store; only the rollback (a Serve cluster's business, tested on local by
tests/integration/test_local_pipeline.py) is recorded instead of applied."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from raylift.deploy_state import DeploymentState, run_key
from raylift.errors import GateError, RayliftValueError
from raylift.operators.benchmark import BenchmarkOperator
from raylift.store import LocalStore
from tests.bench.conftest import stub  # noqa: F401  (the stub server fixture)

CONFIG = {"applications": [{"name": "llm", "args": {"served_model_name": "stub"}}]}
# a new version: the same app with another engine setting (a release the gate judges and can undo)
NEW_VERSION = {"applications": [{"name": "llm", "args": {"served_model_name": "stub",
                                                         "engine_args": {"max_num_seqs": 1}}}]}


class _TI:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        assert (task_ids, key) == ("deploy", "serve_config")
        return self.config


@pytest.fixture()
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> DeploymentState:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path))
    return DeploymentState(LocalStore(tmp_path / "model-store"), "local", "llm")


@pytest.fixture()
def rollbacks(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    calls: list[str] = []

    def restore_app(target: Any, state: Any, run_id: str, app_name: str, **_: Any) -> str:
        calls.append(run_id)
        return f"restored app {app_name!r} from the last good config"

    monkeypatch.setattr("raylift.rollback.restore_app", restore_app)
    yield calls


def run(url: str, run_id: str, served_name: str = "stub", config: dict[str, Any] = CONFIG,
        **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("confirm_pause_s", 0.5)  # a regression's confirmation, without the minute's pause
    kwargs.setdefault("concurrency", [1, 4])
    op = BenchmarkOperator(task_id="benchmark", target="local", served_name=served_name,
                           deployed={"endpoint": url, "kind": "llm"}, requests_per_level=16, **kwargs)
    return op.execute({"run_id": run_id, "ti": _TI(config)})


def test_all_failed_benchmark_with_one_slo_given_is_rejected_and_rolled_back(
    stub: Callable[..., str], state: DeploymentState, rollbacks: list[str]
) -> None:
    url = stub(fail_every=1)  # every completion answers HTTP 500
    with pytest.raises(GateError) as exc:
        run(url, "manual__all_failed", slos={"max_ttft_p99_ms": 500})
    message = str(exc.value)
    # the given SLO did not drop the default max_error_rate 0, and the empty levels fail on their own
    assert "error_rate = 1, SLO limit 0" in message, message
    assert "every request failed at concurrency 1" in message and "every request failed at concurrency 4" in message
    assert "Rolled back: restored app 'llm'" in message and rollbacks == ["manual__all_failed"]
    assert state.last_good() is None  # never recorded as good
    # even with the error-rate SLO turned off explicitly, nothing that failed every request passes
    with pytest.raises(GateError, match="every request failed"):
        run(url, "manual__all_failed_2", slos={"max_ttft_p99_ms": 500, "max_error_rate": None})


def test_served_name_change_starts_a_new_baseline_and_last_good_follows_passing_runs(
    stub: Callable[..., str], state: DeploymentState, rollbacks: list[str]
) -> None:
    url = stub(ttft_ms=2, itl_ms=1)
    first = run(url, "manual__1", served_name="old-name")
    assert first["judgement"]["verdict"] == "new baseline"
    assert state.last_good()["benchmark"]["model"] == "old-name"
    second = run(url, "manual__2")  # the served name changed: no "baseline is for model ..." wedge
    assert second["judgement"]["verdict"] == "new baseline" and "served model changed" in second["judgement"]["note"]
    assert state.last_good()["run_id"] == "manual__2"
    third = run(url, "manual__3")  # same name: judged against the second run's samples
    assert third["judgement"]["verdict"] in ("pass", "inconclusive"), third["judgement"]
    assert {m["metric"] for m in third["judgement"]["metrics"]} >= {"ttft_ms", "tpot_ms", "e2e_ms", "error_rate"}
    assert "samples" not in third["levels"][0]  # the XCom stays small; benchmark.json keeps them
    saved = state.store.read_json(f"{run_key('manual__3')}/benchmark.json")
    assert len(saved["levels"][0]["samples"]["e2e_ms"]) == 16 and saved["judgement"] == third["judgement"]
    assert state.last_good()["run_id"] == "manual__3" and rollbacks == []
    # strict: an inconclusive judgement fails too (16 requests at a 0 tolerance cannot prove "no worse"). A new
    # version: with the same config, a busy box's "regressed" would be the machine's and not fail the run
    with pytest.raises(GateError, match="Release gate failed: .*inconclusive"):
        run(url, "manual__4", config=NEW_VERSION, max_regression=0.0, regression_strict=True)
    assert state.last_good()["run_id"] == "manual__3" and rollbacks == ["manual__4"]


def test_regression_baseline_none_starts_a_new_baseline_and_unknown_values_are_refused(
    stub: Callable[..., str], state: DeploymentState, rollbacks: list[str]
) -> None:
    fast = stub(ttft_ms=2, itl_ms=1)
    run(fast, "manual__fast")
    slow = stub(ttft_ms=60, itl_ms=20)  # far slower than the last good run: judged regressed against it
    with pytest.raises(GateError, match="regressed"):
        run(slow, "manual__slow", config=NEW_VERSION)
    assert state.last_good()["run_id"] == "manual__fast"
    rebased = run(slow, "manual__rebased", regression_baseline="none")  # re-baseline: SLOs only
    assert rebased["judgement"]["verdict"] == "new baseline"
    assert state.last_good()["run_id"] == "manual__rebased"
    with pytest.raises(RayliftValueError, match="regression_baseline 'latest' is not one of"):
        run(fast, "manual__typo", regression_baseline="latest")


def test_a_regression_is_confirmed_by_a_second_benchmark_before_it_rolls_back(
    stub: Callable[..., str], state: DeploymentState, rollbacks: list[str]
) -> None:
    run(stub(ttft_ms=2, itl_ms=1), "manual__base")
    with pytest.raises(GateError, match="regressed"):
        run(stub(ttft_ms=60, itl_ms=20), "manual__slower", config=NEW_VERSION)
    saved = state.store.read_json(f"{run_key('manual__slower')}/benchmark.json")
    # the first judgement said regressed, a second benchmark (judged on its own) said so too
    confirmation = saved["confirmation"]
    assert confirmation["first_judgement"]["verdict"] == "regressed" and confirmation["pause_s"] == 0.5
    assert confirmation["first_overall"]["requests"] == 32 and "samples" not in confirmation["first_levels"][0]
    assert len(saved["levels"][0]["samples"]["ttft_ms"]) == 16  # the confirmation's own requests
    assert saved["judgement"]["verdict"] == "regressed" and rollbacks == ["manual__slower"]
    assert state.last_good()["run_id"] == "manual__base"


def test_a_slow_spell_that_is_over_when_the_confirmation_runs_does_not_roll_back(
    stub: Callable[..., str], state: DeploymentState, rollbacks: list[str]
) -> None:
    """The same server, slow only for the first benchmark's 16 requests (+150 ms TTFT, as a busy machine's
    spell): the first benchmark is judged regressed; the confirmation, after the pause, is not.

    The delays are tens of ms (a request ~150 ms), not 2 ms: on the 2-core box running the heavy tests
    beside this one, a few ms of scheduling delay on a 17 ms request was itself a >10 % "regression" of
    the confirmation (CI, stop 23). The spell counts requests, so it covers the first benchmark however
    slowly the machine runs it. One concurrency level: at 4 streams the stub and the client share the loaded
    box's cores, and under the full suite's load the confirmation's concurrency-4 level itself read 35-50 %
    slower (2026-11-26, light part beside the vLLM tests); what this test is about needs one level."""
    steady = {"ttft_ms": 60, "itl_ms": 6}
    run(stub(**steady), "manual__base", concurrency=[1])
    spell = stub(**steady, slow_spell_requests=16, slow_spell_ttft_ms=150)
    passed = run(spell, "manual__spell", config=NEW_VERSION, confirm_pause_s=0.5, concurrency=[1])
    saved = state.store.read_json(f"{run_key('manual__spell')}/benchmark.json")
    assert saved["confirmation"]["first_judgement"]["verdict"] == "regressed", saved["confirmation"]
    assert passed["judgement"]["verdict"] in ("pass", "inconclusive"), passed["judgement"]
    assert rollbacks == [] and state.last_good()["run_id"] == "manual__spell"


def test_the_same_config_judged_slower_is_the_machines_doing_and_is_not_rolled_back(
    stub: Callable[..., str], state: DeploymentState, rollbacks: list[str]
) -> None:
    """A redeploy of the very config the baseline run served (REST or schedule, same model, args, artifact)
    on a machine that has become slower: judged regressed, but there is no release to undo (a rollback
    would restore this same config), so it passes, says why, and the baseline stays the faster run's."""
    run(stub(ttft_ms=2, itl_ms=1), "manual__base")
    slower = stub(ttft_ms=60, itl_ms=20)
    passed = run(slower, "manual__same", confirm_pause_s=60.0)  # no confirmation: nothing to confirm
    judgement = passed["judgement"]
    assert judgement["verdict"] == "regressed", judgement  # the comparison is kept and shown as it is
    assert "same app config as the baseline run manual__base" in judgement["not_attributed"]
    saved = state.store.read_json(f"{run_key('manual__same')}/benchmark.json")
    assert "confirmation" not in saved and saved["judgement"] == judgement
    assert rollbacks == [] and state.last_good()["run_id"] == "manual__base"
    # the same slow server as a new version is a release: judged, confirmed and rolled back
    with pytest.raises(GateError, match="regressed"):
        run(slower, "manual__new", config=NEW_VERSION)
    assert rollbacks == ["manual__new"]


def test_the_run_keeps_llmperfs_summary_files_beside_its_results_and_the_params_reach_the_benchmark(
    stub: Callable[..., str], state: DeploymentState, rollbacks: list[str]
) -> None:
    import json

    url = stub(ttft_ms=2, itl_ms=1)
    out = run(url, "manual__llmperf", served_name="org/model", max_seconds_per_level="30", warmup_requests="2")
    folder = state.store.root / run_key("manual__llmperf")
    result = json.loads((folder / "benchmark.json").read_text())
    assert (result["max_seconds_per_level"], result["warmup_requests"]) == (30.0, 2)  # rendered Params, as text
    files = json.loads((folder / "llmperf_summary.json").read_text())
    assert sorted(files) == ["1", "4"]
    four = files["4"]
    assert four["model"] == "org/model" and four["num_concurrent_requests"] == 4
    assert four["results_num_completed_requests"] == 16 and four["results_ttft_s_quantiles_p99"] > 0
    assert out["levels"][1]["llmperf"]["num_requests_started"] == 16  # in the XCom summary too


def test_cost_is_evidence_not_a_gate_and_a_bad_cost_param_fails_before_any_request(
    stub: Callable[..., str], state: DeploymentState, rollbacks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RAYLIFT_DASHBOARD_PORT", "18999")  # nothing answers: the local target cannot count nodes
    url = stub(ttft_ms=2, itl_ms=1)
    out = run(url, "manual__cost", cost={"prices": {"local": 0.5}})
    assert out["cost"]["error"].startswith("ClusterError: Cannot reach the Ray dashboard"), out["cost"]
    assert state.last_good()["run_id"] == "manual__cost" and rollbacks == []  # the run passed all the same
    with pytest.raises(RayliftValueError, match="cost"):
        run(url, "manual__bad_cost", cost={"price": {"local": 1}})
    assert rollbacks == [] and state.last_good()["run_id"] == "manual__cost"


def test_the_sweep_param_reaches_the_benchmark(stub: Callable[..., str], state: DeploymentState,
                                               rollbacks: list[str]) -> None:
    # One stream at a time: no gain past concurrency 1, but for the client's gap between one request's end
    # and the next one's start, which level 2 hides (it always has one queued). On the 2-core box beside the
    # Ray stacks that gap alone was >5 % of ~0.3 s requests (2026-11-26, Serve's proxy suite: levels 1, 2, 4,
    # knee 2), so level 2 may pass the gain rule; level 4 cannot. Without max_active throughput doubles each
    # level and the sweep runs to the cap (knee 8): the gain rule, not the cap, must end it within two steps.
    url = stub(ttft_ms=50, itl_ms=15, max_active=1)
    out = run(url, "manual__sweep", sweep='{"max_concurrency": 8}')  # a rendered Param is text
    sweep, levels = out["sweep"], [lv["concurrency"] for lv in out["levels"]]
    assert sweep["stop_reason"].startswith("throughput gain"), sweep
    assert levels in ([1, 2], [1, 2, 4]) and sweep["knee_concurrency"] <= 2, (levels, sweep)
    with pytest.raises(RayliftValueError, match="sweep"):
        run(url, "manual__bad_sweep", sweep={"factor": 1})
