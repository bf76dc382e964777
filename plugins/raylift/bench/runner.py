"""The entry points the operators call: one benchmark over a list of concurrency levels, and its table."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from raylift.bench.llmperf_summary import metrics_summary
from raylift.bench.loadgen import LoadGenerator
from raylift.bench.metrics import RequestRecord, samples, summarize
from raylift.bench.profiles import generate_requests, get_profile
from raylift.bench.prompt_sizing import TOKENIZER, WORDS, endpoint_tokenizer, size_prompts
from raylift.bench.sweep import Breach, SweepSpec, level_requests, stop_reason
from raylift.bench.sweep import verdict as sweep_verdict
from raylift.config import BENCHMARK_ROUND_WAVES, BENCHMARK_ROUNDS
from raylift.errors import RayliftValueError


def rounds_for(requests: int, concurrency: int, *, max_rounds: int = BENCHMARK_ROUNDS) -> int:
    """How many rounds a level's requests go out in: up to ``max_rounds``, each at least
    :data:`BENCHMARK_ROUND_WAVES` waves of ``concurrency`` (a round smaller than that would not run at
    its level's concurrency). 1 when the level is too small to split."""
    return max(1, min(max_rounds, requests // (BENCHMARK_ROUND_WAVES * concurrency)))


def _split(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` in ``parts`` consecutive slices whose sizes differ by at most one."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (i < extra)
        out.append(items[start:end])
        start = end
    return out


async def arun_benchmark(
    base_url: str,
    model: str,
    *,
    profile: str | Mapping[str, Any] = "smoke",
    concurrency: list[int] | None = None,
    requests_per_level: int = 16,
    max_seconds_per_level: float = 120.0,
    api: str = "chat",
    stream: bool = True,
    allow_remote: bool = False,
    progress: Callable[[str], None] | None = None,
    max_rounds: int = BENCHMARK_ROUNDS,
    size_prompts_by_tokenizer: bool = True,
    warmup_requests: int = 0,
    sweep: Mapping[str, Any] | None = None,
    slo_breach: Breach | None = None,
) -> dict[str, Any]:
    """:func:`run_benchmark` for callers already inside an event loop (triggers)."""
    sweep_spec = SweepSpec.from_param(sweep)
    levels_wanted = sweep_spec.levels() if sweep_spec else list(concurrency or [1, 4])
    if not levels_wanted or any(not isinstance(c, int) or c < 1 for c in levels_wanted):
        raise RayliftValueError(f"concurrency must be a list of positive integers, got {concurrency!r}")
    if warmup_requests < 0:
        raise RayliftValueError(f"warmup_requests must be 0 or more, got {warmup_requests}")
    if requests_per_level < 1 or max_seconds_per_level <= 0:
        raise RayliftValueError(
            f"requests_per_level ({requests_per_level}) and max_seconds_per_level "
            f"({max_seconds_per_level}) must be positive"
        )
    spec = get_profile(profile)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    all_records: list[RequestRecord] = []
    levels: list[dict[str, Any]] = []
    total_duration = 0.0
    total_cancelled = 0
    t0 = time.perf_counter()
    per_level: dict[int, list[Any]] = {c: [] for c in levels_wanted}
    deadline = {c: float(max_seconds_per_level) for c in levels_wanted}
    async with LoadGenerator(
        base_url, model, api=api, stream=stream, allow_remote=allow_remote,  # type: ignore[arg-type]
        max_connections=max(levels_wanted),
    ) as gen:
        # Prompts in the served tokenizer's tokens when the endpoint can say (before any timing)
        tokenizer = await endpoint_tokenizer(gen.post_json, model) if size_prompts_by_tokenizer else None
        sizing = TOKENIZER if tokenizer is not None else WORDS

        async def planned(c: int) -> list[list[Any]]:
            count = level_requests(requests_per_level, c) if sweep_spec else requests_per_level
            specs = await size_prompts(tokenizer, generate_requests(spec, count, seed_offset=c))
            return _split(specs, rounds_for(count, c, max_rounds=max_rounds))

        async def run_round(c: int, r: int, rounds: list[list[Any]]) -> None:
            tell = None if progress is None else (
                lambda line: progress(f"round {r + 1}/{len(rounds)}, {line}"))
            outcome = await gen.run_concurrency(rounds[r], c, max_seconds=deadline[c], progress=tell)
            deadline[c] -= outcome.duration_s
            per_level[c].append(outcome)

        if warmup_requests:  # untimed, other prompts than the measured ones (seed offset 0: no level has it)
            warmup = await size_prompts(tokenizer, generate_requests(spec, warmup_requests, seed_offset=0))
            outcome = await gen.run_concurrency(warmup, min(warmup_requests, max(levels_wanted)),
                                                max_seconds=max_seconds_per_level)
            if progress is not None:
                progress(f"warm-up: {len(outcome.records)} requests in {outcome.duration_s:.1f}s, not measured")
        swept: dict[str, Any] | None = None
        if sweep_spec:  # one level after another, each decided by the ones before (raylift.bench.sweep)
            summaries: list[dict[str, Any]] = []
            for c in levels_wanted:
                rounds = await planned(c)
                for r in range(len(rounds)):
                    if deadline[c] > 0:
                        await run_round(c, r, rounds)
                records = [rec for o in per_level[c] for rec in o.records]
                summaries.append({"concurrency": c, **summarize(records, sum(o.duration_s for o in per_level[c]))})
                reason = stop_reason(summaries, sweep_spec, slo_breach)
                if reason:
                    break
            levels_wanted = [lv["concurrency"] for lv in summaries]
            swept = sweep_verdict(summaries, sweep_spec, str(reason), slo_breach)
            if progress is not None:
                progress(f"sweep stopped: {reason}; knee at concurrency {swept['knee_concurrency']}, best "
                         f"{swept['best_concurrency']} ({swept['best_output_tokens_per_s']:.1f} tok/s)")
        else:
            # Each level's requests (the same seeded set as one block would send) in rounds, the levels taking
            # turns round by round, so every level is sampled across the whole benchmark's time.
            plan = {c: await planned(c) for c in levels_wanted}
            for r in range(max(len(p) for p in plan.values())):
                for c in levels_wanted:
                    if r < len(plan[c]) and deadline[c] > 0:
                        await run_round(c, r, plan[c])
    for c in levels_wanted:
        outcomes = per_level[c]
        records = [rec for o in outcomes for rec in o.records]
        duration = sum(o.duration_s for o in outcomes)
        cancelled = sum(o.cancelled for o in outcomes)
        levels.append({"concurrency": c, **summarize(records, duration, cancelled=cancelled),
                       "rounds": len(outcomes), "samples": samples(records, rounds=[o.records for o in outcomes]),
                       "llmperf": metrics_summary(records, duration)})
        all_records.extend(records)
        total_duration += duration
        total_cancelled += cancelled
    if progress is not None:
        progress(f"benchmark done: {len(all_records)} requests in {time.perf_counter() - t0:.1f}s")
    return {
        "model": model,
        "endpoint": gen.root,
        "api": api,
        "stream": stream,
        "started_at": started,
        # how prompts were sized is part of the profile: a baseline of word prompts measured other requests
        "profile": {**spec.as_dict(), "prompt_sizing": sizing},
        "requests_per_level": requests_per_level,
        "max_seconds_per_level": max_seconds_per_level,
        "warmup_requests": warmup_requests,
        "levels": levels,
        **({"sweep": swept} if swept else {}),
        "overall": summarize(all_records, total_duration, cancelled=total_cancelled),
    }


def run_benchmark(
    base_url: str,
    model: str,
    *,
    profile: str | dict[str, Any] = "smoke",
    concurrency: list[int] | None = None,
    requests_per_level: int = 16,
    max_seconds_per_level: float = 120.0,
    api: str = "chat",
    stream: bool = True,
    allow_remote: bool = False,
    progress: Callable[[str], None] | None = None,
    max_rounds: int = BENCHMARK_ROUNDS,
    size_prompts_by_tokenizer: bool = True,
    warmup_requests: int = 0,
    sweep: Mapping[str, Any] | None = None,
    slo_breach: Breach | None = None,
) -> dict[str, Any]:
    """Benchmark an OpenAI-compatible endpoint at each concurrency level; a JSON-able result.

    Each level sends ``requests_per_level`` requests (seeded by the profile and the level) in rounds
    (:func:`rounds_for`; the levels take turns) and stops early after ``max_seconds_per_level`` in all. ``concurrency`` defaults to ``[1, 4]``. ``overall`` pools
    every request; its throughput is all output tokens over the summed level durations. Prompts are sized
    in the served tokenizer's tokens when the endpoint has ``/tokenize`` (``profile.prompt_sizing`` says
    whether they were; :mod:`raylift.bench.prompt_sizing`). With ``sweep`` (:class:`raylift.bench.sweep.SweepSpec`'s
    fields) the levels are a saturation sweep instead of ``concurrency``: one after another until throughput
    stops growing or ``slo_breach`` names a broken SLO; ``result["sweep"]`` names the knee and the best level.

    :raises EndpointNotAllowedError: ``base_url`` is not loopback and ``allow_remote`` is False.
    """
    return asyncio.run(
        arun_benchmark(
            base_url, model, profile=profile, concurrency=concurrency,
            requests_per_level=requests_per_level, max_seconds_per_level=max_seconds_per_level,
            api=api, stream=stream, allow_remote=allow_remote, progress=progress, max_rounds=max_rounds,
            size_prompts_by_tokenizer=size_prompts_by_tokenizer, warmup_requests=warmup_requests,
            sweep=sweep, slo_breach=slo_breach,
        )
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


_COLUMNS = (
    ("conc", 5), ("reqs", 5), ("err%", 6), ("out tok/s", 10), ("req/s", 7),
    ("TTFT p50", 9), ("TTFT p99", 9), ("ITL p50", 8), ("ITL p99", 8), ("TPOT p50", 9),
    ("E2E p50", 9), ("E2E p99", 9),
)


def format_table(result: Mapping[str, Any]) -> str:
    """A fixed-width table, one row per concurrency level (times in ms), for logs and terminals."""
    header = " ".join(name.rjust(width) for name, width in _COLUMNS)
    lines = [header, "-" * len(header)]
    for level in result["levels"]:
        cells = (
            str(level["concurrency"]), str(level["requests"]), f"{100 * level['error_rate']:.1f}",
            f"{level['output_tokens_per_s']:.1f}", f"{level['requests_per_s']:.2f}",
            _ms(level["ttft_ms"]["p50"]), _ms(level["ttft_ms"]["p99"]),
            _ms(level["itl_ms"]["p50"]), _ms(level["itl_ms"]["p99"]), _ms(level["tpot_ms"]["p50"]),
            _ms(level["e2e_ms"]["p50"]), _ms(level["e2e_ms"]["p99"]),
        )
        lines.append(" ".join(cell.rjust(width) for cell, (_, width) in zip(cells, _COLUMNS)))
    return "\n".join(lines)
