"""The entry points the operators call: one benchmark over a list of concurrency levels, and its table."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from raylift.bench.loadgen import LoadGenerator
from raylift.bench.metrics import RequestRecord, samples, summarize
from raylift.bench.profiles import generate_requests, get_profile
from raylift.errors import RayliftValueError


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
) -> dict[str, Any]:
    """:func:`run_benchmark` for callers already inside an event loop (triggers)."""
    levels_wanted = list(concurrency or [1, 4])
    if not levels_wanted or any(not isinstance(c, int) or c < 1 for c in levels_wanted):
        raise RayliftValueError(f"concurrency must be a list of positive integers, got {concurrency!r}")
    if requests_per_level < 1 or max_seconds_per_level <= 0:
        raise RayliftValueError(
            f"requests_per_level ({requests_per_level}) and max_seconds_per_level "
            f"({max_seconds_per_level}) must be positive"
        )
    spec = get_profile(profile)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    all_records: list[RequestRecord] = []
    levels: list[dict[str, Any]] = []
    total_duration = 0.0
    total_cancelled = 0
    t0 = time.perf_counter()
    async with LoadGenerator(
        base_url, model, api=api, stream=stream, allow_remote=allow_remote,  # type: ignore[arg-type]
        max_connections=max(levels_wanted),
    ) as gen:
        for c in levels_wanted:
            specs = generate_requests(spec, requests_per_level, seed_offset=c)
            outcome = await gen.run_concurrency(
                specs, c, max_seconds=max_seconds_per_level, progress=progress
            )
            levels.append({"concurrency": c, **outcome.summary(), "samples": samples(outcome.records)})
            all_records.extend(outcome.records)
            total_duration += outcome.duration_s
            total_cancelled += outcome.cancelled
    if progress is not None:
        progress(f"benchmark done: {len(all_records)} requests in {time.perf_counter() - t0:.1f}s")
    return {
        "model": model,
        "endpoint": gen.root,
        "api": api,
        "stream": stream,
        "started_at": started,
        "profile": spec.as_dict(),
        "requests_per_level": requests_per_level,
        "max_seconds_per_level": max_seconds_per_level,
        "levels": levels,
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
) -> dict[str, Any]:
    """Benchmark an OpenAI-compatible endpoint at each concurrency level; a JSON-able result.

    Each level sends ``requests_per_level`` requests (seeded by the profile and the level) and stops
    early after ``max_seconds_per_level``. ``concurrency`` defaults to ``[1, 4]``. ``overall`` pools
    every request; its throughput is all output tokens over the summed level durations.

    :raises EndpointNotAllowedError: ``base_url`` is not loopback and ``allow_remote`` is False.
    """
    return asyncio.run(
        arun_benchmark(
            base_url, model, profile=profile, concurrency=concurrency,
            requests_per_level=requests_per_level, max_seconds_per_level=max_seconds_per_level,
            api=api, stream=stream, allow_remote=allow_remote, progress=progress,
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
