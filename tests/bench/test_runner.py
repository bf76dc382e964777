from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from raylift.errors import EndpointNotAllowedError, RayliftValueError
from raylift.measure.runner import format_table, run_benchmark
from tests.bench.priority import raised_priority


def test_run_benchmark_result_shape(stub: Callable[..., str]) -> None:
    url = stub(ttft_ms=2, itl_ms=1, fail_every=8)
    lines: list[str] = []
    result = run_benchmark(url, "stub", concurrency=[1, 4], requests_per_level=8, progress=lines.append)
    json.dumps(result)  # JSON-able
    assert result["profile"]["name"] == "smoke" and result["model"] == "stub"
    assert [lv["concurrency"] for lv in result["levels"]] == [1, 4]
    for level in result["levels"]:
        assert level["requests"] == 8 and level["errors"] == 1 and level["error_rate"] == 0.125
        for metric in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            assert set(level[metric]) == {"mean", "p25", "p50", "p75", "p90", "p95", "p99"}
        # each successful request's own numbers, for the regression judgement
        samples = level["samples"]
        assert (samples["ok"], samples["errors"]) == (7, 1)
        assert all(len(samples[m]) == 7 for m in ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s"))
        assert min(samples["ttft_ms"]) >= 2 and min(samples["output_tokens_per_s"]) > 0
    assert result["overall"]["requests"] == 16 and result["overall"]["errors"] == 2
    assert any("concurrency 4: 8/8 requests" in line for line in lines)
    table = format_table(result).splitlines()
    assert len(table) == 4 and table[3].split()[0] == "4"


def test_run_benchmark_refuses_remote_and_bad_levels() -> None:
    with pytest.raises(EndpointNotAllowedError):
        run_benchmark("http://192.0.2.1:8000", "m")
    with pytest.raises(RayliftValueError):
        run_benchmark("http://127.0.0.1:9", "m", concurrency=[0])


def test_cli_writes_json(stub: Callable[..., str], tmp_path: Path) -> None:
    url = stub()
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "raylift.measure", "--url", url, "--model", "stub",
                           "--concurrency", "2", "--requests", "4", "--out", str(out)],
                          capture_output=True, text=True, timeout=60, check=True)
    assert "out tok/s" in proc.stdout
    assert json.loads(out.read_text())["levels"][0]["requests"] == 4


def test_levels_go_out_in_rounds_that_take_turns(stub: Callable[..., str]) -> None:
    from raylift.measure.runner import rounds_for

    # each round holds at least two waves of its level's concurrency, at most BENCHMARK_ROUNDS rounds
    assert [rounds_for(64, c) for c in (1, 4, 8, 32, 64)] == [8, 8, 4, 1, 1]
    lines: list[str] = []
    result = run_benchmark(stub(ttft_ms=1, itl_ms=1), "stub", concurrency=[1, 4], requests_per_level=16,
                           progress=lines.append)
    one, four = result["levels"]
    assert (one["rounds"], four["rounds"]) == (8, 2) and one["requests"] == four["requests"] == 16
    assert one["samples"]["round_sizes"]["ttft_ms"] == [2] * 8 and four["samples"]["round_sizes"]["e2e_ms"] == [8, 8]
    # the levels take turns: level 4's first round runs before level 1's second
    rounds = [ln.split(", ")[0:2] for ln in lines if ln.startswith("round ")]
    assert rounds.index(["round 1/2", "concurrency 4: 8/8 requests"]) < rounds.index(["round 2/8",
                                                                                       "concurrency 1: 2/2 requests"])


def test_warm_up_requests_go_out_untimed_and_each_level_has_llmperfs_summary(stub: Callable[..., str]) -> None:
    import httpx

    url = stub(ttft_ms=2, itl_ms=1)
    lines: list[str] = []
    result = run_benchmark(url, "stub", concurrency=[2], requests_per_level=4, warmup_requests=3,
                           progress=lines.append)
    served = httpx.get(f"{url}/stats", timeout=10).json()["requests"]  # what the server saw, not what we say
    level = result["levels"][0]
    assert served == 7 and level["requests"] == 4 and result["warmup_requests"] == 3
    assert any(line.startswith("warm-up: 3 requests") for line in lines), lines
    llmperf = level["llmperf"]
    assert llmperf["num_requests_started"] == 4 and llmperf["num_completed_requests"] == 4
    assert llmperf["ttft_s"]["mean"] == pytest.approx(level["ttft_ms"]["mean"] / 1e3)
    # the stub has no /tokenize: word prompts, and the result says so
    assert result["profile"]["prompt_sizing"] == "words" and level["sized_input_tokens"] is None
    with pytest.raises(RayliftValueError, match="warmup_requests"):
        run_benchmark(url, "stub", warmup_requests=-1)


def test_a_sweep_climbs_until_throughput_stops_growing_and_names_the_knee(stub: Callable[..., str],
                                                                          tmp_path: Path) -> None:
    from raylift.measure.report import write_report
    from raylift.release.gates import level_breach

    # a server that generates 2 streams at once, the rest wait; delays long against a busy machine's stalls
    url = stub(ttft_ms=50, itl_ms=20, max_active=2)
    lines: list[str] = []
    # the client ahead of ordinary processes while it measures, as the stub runs (a suite run beside the other lanes
    # once read 83 -> 91 tok/s from 4 to 8 streams of this 2-stream server, and climbed on)
    with raised_priority():
        result = run_benchmark(url, "stub", sweep={"max_concurrency": 32}, requests_per_level=8,
                               progress=lines.append)
    sweep = result["sweep"]
    levels = [lv["concurrency"] for lv in result["levels"]]
    by = {lv["concurrency"]: lv["output_tokens_per_s"] for lv in result["levels"]}
    assert levels == sweep["levels"] and levels[:3] == [1, 2, 4] and len(levels) <= 4, (levels, by)
    # the stub's 2 streams, as measured: one stream would read ~1.0; a CI run beside the heavy lane read 1.59
    assert by[2] > 1.4 * by[1], by
    # it stops on its own past the saturation; the knee is at it, or one doubling later when a busy moment of
    # the machine (the suite's heavy part beside it) made the level at 2 read low (seen: 4, +4.9 % at 8)
    knee = sweep["knee_concurrency"]
    assert "throughput gain" in sweep["stop_reason"] and knee in (2, 4), (sweep, by)
    top = max(by.values())  # the knee by its definition, from the measured levels: the lowest within 5 % of the top
    assert by[knee] * 1.05 >= top and all(by[c] * 1.05 < top for c in levels if c < knee), (knee, by)
    assert any(line.startswith("sweep stopped:") and f"knee at concurrency {knee}" in line for line in lines)
    page = write_report(result, tmp_path)["html"].read_text()
    assert f"Knee at concurrency {knee}" in page
    # an SLO the next level breaks stops the climb there, and that level is not the best. At concurrency 4 two of
    # the stub's streams wait for a whole stream before their first token: 40 output tokens make that 50 + 39 x 20
    # = 830 ms, so p99 TTFT 500 ms breaks there (the smoke profile's 16 +- 2 tokens made it 400-480 ms, under the
    # SLO whenever the client kept time: a CI run stopped on throughput at 4 instead); at 1 and 2 TTFT is the
    # stub's 50 ms (150 ms was once broken at 1 by a stall beside the heavy lane)
    long_answers = {"name": "long-answers", "mean_input_tokens": 32, "stddev_input_tokens": 4,
                    "mean_output_tokens": 40, "stddev_output_tokens": 0}
    with raised_priority():
        slow = run_benchmark(url, "stub", profile=long_answers, sweep={"max_concurrency": 32, "min_gain": 0.0},
                             requests_per_level=8, slo_breach=level_breach({"max_ttft_p99_ms": 500.0}))
    assert slow["sweep"]["stop_reason"].startswith("SLO broken at concurrency 4:"), slow["sweep"]
    assert "ttft_ms.p99" in slow["sweep"]["stop_reason"]
    broken = slow["levels"][-1]
    assert broken["ttft_ms"]["p99"] > 500 and slow["sweep"]["best_concurrency"] != broken["concurrency"]
    with pytest.raises(RayliftValueError, match="unknown keys"):
        run_benchmark(url, "stub", sweep={"max": 8})


def test_rounds_the_time_limit_never_sent_count_as_cut_off(stub: Callable[..., str]) -> None:
    """Every planned request is accounted for: a round the level's time ran out before is cut off (cancelled),
    not dropped, so the gate counts it against the candidate (seen failing: 8 of 16 vanished before the fix)."""
    result = run_benchmark(stub(ttft_ms=400, itl_ms=1), "stub", concurrency=[1], requests_per_level=16,
                           max_seconds_per_level=1.0, size_prompts_by_tokenizer=False)
    (level,) = result["levels"]
    assert level["cancelled"] >= 8, level
    assert level["requests"] - level["errors"] + level["cancelled"] == 16, level
