"""The entry points the operators call: one benchmark over a list of concurrency levels (or several endpoints
side by side: a canary beside the app it would replace), and its table."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from raylift.config import BENCHMARK_ROUND_WAVES, BENCHMARK_ROUNDS
from raylift.errors import RayliftValueError
from raylift.measure.engine_metrics import EngineMonitor
from raylift.measure.llmperf_summary import metrics_summary
from raylift.measure.loadgen import LoadGenerator, RunOutcome
from raylift.measure.metrics import goodput_slos, samples, summarize
from raylift.measure.profiles import RequestProfile, RequestSpec, generate_requests, get_profile
from raylift.measure.prompt_sizing import (
    TOKENIZER,
    WORDS,
    EndpointTokenizer,
    endpoint_tokenizer,
    size_prompts,
)
from raylift.measure.sweep import Breach, SweepSpec, level_requests, stop_reason
from raylift.measure.sweep import verdict as sweep_verdict


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


def _levels(concurrency: list[int] | None, *, requests_per_level: int, max_seconds_per_level: float,
            warmup_requests: int) -> list[int]:
    """The concurrency levels asked for (default ``[1, 4]``), after checking the benchmark's arguments."""
    levels = list(concurrency or [1, 4])
    if not levels or any(not isinstance(c, int) or c < 1 for c in levels):
        raise RayliftValueError(f"concurrency must be a list of positive integers, got {concurrency!r}")
    if warmup_requests < 0:
        raise RayliftValueError(f"warmup_requests must be 0 or more, got {warmup_requests}")
    if requests_per_level < 1 or max_seconds_per_level <= 0:
        raise RayliftValueError(
            f"requests_per_level ({requests_per_level}) and max_seconds_per_level "
            f"({max_seconds_per_level}) must be positive"
        )
    return levels


def _every_request_counted(outcome: RunOutcome, planned: int) -> RunOutcome:
    """A round's outcome with the requests the time bound kept from starting counted as cut off too (the load
    generator counts only those in flight): every planned request is a record or cut off, none vanishes."""
    return RunOutcome(outcome.records, outcome.duration_s, max(outcome.cancelled, planned - len(outcome.records)))


def _level_result(c: int, outcomes: list[RunOutcome], *, slos: Mapping[str, float | None] | None,
                  monitor: EngineMonitor | None) -> dict[str, Any]:
    """One level's entry of a result, from the outcomes of its rounds (in order)."""
    records = [rec for o in outcomes for rec in o.records]
    duration = sum(o.duration_s for o in outcomes)
    cancelled = sum(o.cancelled for o in outcomes)
    return {"concurrency": c, **summarize(records, duration, cancelled=cancelled, slos=slos),
            "rounds": len(outcomes), "samples": samples(records, rounds=[o.records for o in outcomes]),
            "llmperf": metrics_summary(records, duration),
            **({"engine_metrics": monitor.summary(c)} if monitor is not None else {})}


def _result(*, model: str, endpoint: str, api: str, stream: bool, started: str, spec: RequestProfile,
            sizing: str, requests_per_level: int, max_seconds_per_level: float, warmup_requests: int,
            per_level: Mapping[int, list[RunOutcome]], levels: list[dict[str, Any]],
            slos: Mapping[str, float | None] | None) -> dict[str, Any]:
    """A benchmark result around its ``levels`` (``overall`` pools every level's requests)."""
    outcomes = [o for c in per_level for o in per_level[c]]
    return {
        "model": model,
        "endpoint": endpoint,
        "api": api,
        "stream": stream,
        "started_at": started,
        # how prompts were sized is part of the profile: a baseline of word prompts measured other requests
        "profile": {**spec.as_dict(), "prompt_sizing": sizing},
        "requests_per_level": requests_per_level,
        "max_seconds_per_level": max_seconds_per_level,
        "warmup_requests": warmup_requests,
        "levels": levels,
        "overall": summarize([rec for o in outcomes for rec in o.records], sum(o.duration_s for o in outcomes),
                             cancelled=sum(o.cancelled for o in outcomes), slos=slos),
    }


async def _planned(spec: RequestProfile, tokenizer: EndpointTokenizer | None, count: int, c: int, *,
                   max_rounds: int) -> list[list[RequestSpec]]:
    """Level ``c``'s ``count`` seeded requests (sized), in its rounds (:func:`rounds_for`)."""
    specs = await size_prompts(tokenizer, generate_requests(spec, count, seed_offset=c))
    return _split(specs, rounds_for(count, c, max_rounds=max_rounds))


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
    engine_metrics: bool = False,
    slos: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """:func:`run_benchmark` for callers already inside an event loop (triggers)."""
    sweep_spec = SweepSpec.from_param(sweep)
    levels_wanted = _levels(sweep_spec.levels() if sweep_spec else concurrency,
                            requests_per_level=requests_per_level, max_seconds_per_level=max_seconds_per_level,
                            warmup_requests=warmup_requests)
    if slos is not None:
        goodput_slos(slos)  # refuse bad keys before any request
    spec = get_profile(profile)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    per_level: dict[int, list[RunOutcome]] = {c: [] for c in levels_wanted}
    deadline = {c: float(max_seconds_per_level) for c in levels_wanted}
    monitor: EngineMonitor | None = None
    async with contextlib.AsyncExitStack() as stack:
        gen = await stack.enter_async_context(LoadGenerator(
            base_url, model, api=api, stream=stream, allow_remote=allow_remote,  # type: ignore[arg-type]
            max_connections=max(levels_wanted),
        ))
        if engine_metrics:
            monitor = await stack.enter_async_context(EngineMonitor(base_url, allow_remote=allow_remote))
        # Prompts in the served tokenizer's tokens when the endpoint can say (before any timing)
        tokenizer = await endpoint_tokenizer(gen.post_json, model) if size_prompts_by_tokenizer else None
        sizing = TOKENIZER if tokenizer is not None else WORDS

        async def planned(c: int) -> list[list[RequestSpec]]:
            count = level_requests(requests_per_level, c) if sweep_spec else requests_per_level
            return await _planned(spec, tokenizer, count, c, max_rounds=max_rounds)

        async def run_round(c: int, r: int, rounds: list[list[RequestSpec]]) -> None:
            tell = None if progress is None else (
                lambda line: progress(f"round {r + 1}/{len(rounds)}, {line}"))
            async with monitor.during(c) if monitor is not None else contextlib.nullcontext():
                outcome = await gen.run_concurrency(rounds[r], c, max_seconds=deadline[c], progress=tell)
            deadline[c] -= outcome.duration_s
            per_level[c].append(_every_request_counted(outcome, len(rounds[r])))

        if warmup_requests:  # untimed, other prompts than the measured ones (seed offset 0: no level has it)
            warmup = await size_prompts(tokenizer, generate_requests(spec, warmup_requests, seed_offset=0))
            outcome = await gen.run_concurrency(warmup, min(warmup_requests, max(levels_wanted)),
                                                max_seconds=max_seconds_per_level)
            if progress is not None:
                progress(f"warm-up: {len(outcome.records)} requests in {outcome.duration_s:.1f}s, not measured")
        swept: dict[str, Any] | None = None
        if sweep_spec:  # one level after another, each decided by the ones before (raylift.measure.sweep)
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
            per_level = {c: per_level[c] for c in levels_wanted}
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
                    elif r < len(plan[c]):  # the level's time ran out before this round: its requests are cut off
                        per_level[c].append(RunOutcome([], 0.0, len(plan[c][r])))
    levels = [_level_result(c, per_level[c], slos=slos, monitor=monitor) for c in levels_wanted]
    if progress is not None:
        total = sum(len(o.records) for c in levels_wanted for o in per_level[c])
        progress(f"benchmark done: {total} requests in {time.perf_counter() - t0:.1f}s")
    result = _result(model=model, endpoint=gen.root, api=api, stream=stream, started=started, spec=spec,
                     sizing=sizing, requests_per_level=requests_per_level,
                     max_seconds_per_level=max_seconds_per_level, warmup_requests=warmup_requests,
                     per_level=per_level, levels=levels, slos=slos)
    if swept:
        overall = result.pop("overall")
        result["sweep"] = swept
        result["overall"] = overall  # the key order the result always had
    return result


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
    engine_metrics: bool = False,
    slos: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """Benchmark an OpenAI-compatible endpoint at each concurrency level; a JSON-able result.

    Each level sends ``requests_per_level`` requests (seeded by the profile and the level) in rounds
    (:func:`rounds_for`; the levels take turns) and stops early after ``max_seconds_per_level`` in all. ``concurrency`` defaults to ``[1, 4]``. ``overall`` pools
    every request; its throughput is all output tokens over the summed level durations. Prompts are sized
    in the served tokenizer's tokens when the endpoint has ``/tokenize`` (``profile.prompt_sizing`` says
    whether they were; :mod:`raylift.measure.prompt_sizing`). With ``sweep`` (:class:`raylift.measure.sweep.SweepSpec`'s
    fields) the levels are a saturation sweep instead of ``concurrency``: one after another until throughput
    stops growing or ``slo_breach`` names a broken SLO; ``result["sweep"]`` names the knee and the best level.
    With ``engine_metrics`` each level also carries ``engine_metrics``: vLLM's ``/metrics`` sampled while it
    ran (:mod:`raylift.measure.engine_metrics`). With ``slos`` each level and ``overall`` carry ``goodput``
    (:func:`raylift.measure.metrics.goodput`).

    :raises EndpointNotAllowedError: ``base_url`` is not loopback and ``allow_remote`` is False.
    """
    return asyncio.run(
        arun_benchmark(
            base_url, model, profile=profile, concurrency=concurrency,
            requests_per_level=requests_per_level, max_seconds_per_level=max_seconds_per_level,
            api=api, stream=stream, allow_remote=allow_remote, progress=progress, max_rounds=max_rounds,
            size_prompts_by_tokenizer=size_prompts_by_tokenizer, warmup_requests=warmup_requests,
            sweep=sweep, slo_breach=slo_breach, engine_metrics=engine_metrics, slos=slos,
        )
    )


#: How a side-by-side benchmark runs its arms (:func:`run_side_by_side`'s ``design``). ``concurrent``: every round on
#: all arms at once (each arm on its own devices or host: they do not share what does the work). ``interleaved``:
#: randomized multiple interleaved trials (Abedi & Brecht, ICPE 2017): in every round each arm is measured alone,
#: one after another, in a fresh random order each round, so arms that share a host never load it together and
#: neither always goes first (``raylift.release.measured.measurement_design`` chooses).
CONCURRENT, INTERLEAVED = "concurrent", "interleaved"
DESIGNS = (CONCURRENT, INTERLEAVED)


@dataclass(frozen=True)
class Arm:
    """One endpoint of a side-by-side benchmark: its URL, the served model name when it differs from the
    benchmark's, and ``scale``: the arm gets ``scale`` × each level's concurrency and requests (the same load
    per replica for an app with ``scale`` × the replicas of the arm at scale 1)."""

    base_url: str
    model: str | None = None
    scale: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.scale, bool) or not isinstance(self.scale, int) or self.scale < 1:
            raise RayliftValueError(f"an arm's scale must be a positive integer, got {self.scale!r}")


def _scaled_rounds(specs: Sequence[RequestSpec], count: int, rounds: int, scale: int, top: int
                   ) -> list[list[RequestSpec]]:
    """An arm's rounds: ``specs`` holds ``count`` requests (every arm's, in :func:`rounds_for`'s rounds)
    followed by ``top - 1`` extra requests for each of them; an arm at ``scale`` sends each shared request
    followed by its first ``scale - 1`` extras, so its round r holds round r's shared requests and
    ``scale`` × as many in all."""
    out = []
    for indices in _split(list(range(count)), rounds):
        out.append([s for i in indices
                    for s in (specs[i], *specs[count + i * (top - 1): count + i * (top - 1) + scale - 1])])
    return out


async def arun_side_by_side(
    arms: Mapping[str, Arm],
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
    metrics: bool = True,
    slos: Mapping[str, float | None] | None = None,
    sweep: Mapping[str, Any] | None = None,
    engine_metrics: bool | None = None,
    design: str = CONCURRENT,
    seed: int | None = None,
) -> dict[str, dict[str, Any]]:
    """:func:`run_side_by_side` for callers already inside an event loop (triggers)."""
    if design not in DESIGNS:
        raise RayliftValueError(f"design {design!r} is not one of {list(DESIGNS)}: 'concurrent' measures every "
                                "arm at once, 'interleaved' each arm alone in a random order each round")
    if engine_metrics is not None:  # run_benchmark's name for it, so both take the same options
        metrics = engine_metrics
    if sweep is not None:
        raise RayliftValueError("a side-by-side benchmark runs the given concurrency levels; it has no "
                                "saturation sweep (sweep must be None)")
    if not arms or not all(isinstance(arm, Arm) for arm in arms.values()):
        raise RayliftValueError(f"arms must map labels to Arm(base_url, model, scale), got {arms!r}")
    levels_wanted = _levels(concurrency, requests_per_level=requests_per_level,
                            max_seconds_per_level=max_seconds_per_level, warmup_requests=warmup_requests)
    if slos is not None:
        goodput_slos(slos)
    spec = get_profile(profile)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    labels = list(arms)
    top = max(arm.scale for arm in arms.values())
    per_level: dict[str, dict[int, list[RunOutcome]]] = {a: {c: [] for c in levels_wanted} for a in labels}
    # the level's time bound: shared by the arms measured at once; each arm's own when each is measured alone
    deadline = {c: float(max_seconds_per_level) for c in levels_wanted}
    own_deadline = {(a, c): float(max_seconds_per_level) for a in labels for c in levels_wanted}
    rng = random.Random(seed)
    orders: list[dict[str, Any]] = []
    monitors: dict[str, EngineMonitor] = {}
    async with contextlib.AsyncExitStack() as stack:
        gens = {a: await stack.enter_async_context(LoadGenerator(
            arms[a].base_url, arms[a].model or model, api=api, stream=stream,  # type: ignore[arg-type]
            allow_remote=allow_remote, max_connections=max(levels_wanted) * arms[a].scale)) for a in labels}
        if metrics:
            for a in labels:
                monitors[a] = await stack.enter_async_context(
                    EngineMonitor(arms[a].base_url, allow_remote=allow_remote))
        # one sizing for every arm (the first arm's tokenizer): they must send the very same prompts
        first = gens[labels[0]]
        tokenizer = await endpoint_tokenizer(first.post_json, first.model) if size_prompts_by_tokenizer else None
        sizing = TOKENIZER if tokenizer is not None else WORDS

        def tell(a: str, prefix: str) -> Callable[[str], None] | None:
            return None if progress is None else (lambda line: progress(f"{a}: {prefix}{line}"))

        if warmup_requests:  # untimed, prompts no level has (seed offset 0); each arm alone when interleaved
            warmup = await size_prompts(tokenizer, generate_requests(spec, warmup_requests * top, seed_offset=0))
            width = min(warmup_requests, max(levels_wanted))

            def warm(a: str) -> Any:
                return gens[a].run_concurrency(warmup[: warmup_requests * arms[a].scale], width * arms[a].scale,
                                               max_seconds=max_seconds_per_level)

            if design == INTERLEAVED:
                done = [await warm(a) for a in labels]
            else:
                done = await asyncio.gather(*(warm(a) for a in labels))
            if progress is not None:
                progress("warm-up: " + ", ".join(f"{a} {len(o.records)} requests in {o.duration_s:.1f}s"
                                                 for a, o in zip(labels, done)) + ", not measured")
        plan: dict[int, dict[str, list[list[RequestSpec]]]] = {}
        for c in levels_wanted:
            count = requests_per_level
            specs = await size_prompts(tokenizer, generate_requests(spec, count * top, seed_offset=c))
            rounds = rounds_for(count, c, max_rounds=max_rounds)
            plan[c] = {a: _scaled_rounds(specs, count, rounds, arms[a].scale, top) for a in labels}

        async def arm_round(a: str, c: int, r: int, bound: float) -> RunOutcome:
            rounds = plan[c][a]
            monitor = monitors.get(a)
            async with monitor.during(c) if monitor is not None else contextlib.nullcontext():
                return await gens[a].run_concurrency(rounds[r], c * arms[a].scale, max_seconds=bound,
                                                     progress=tell(a, f"round {r + 1}/{len(rounds)}, "))

        async def alone(c: int, r: int) -> None:
            """Round ``r`` of level ``c``, each arm alone, in a fresh random order (RMIT)."""
            order = rng.sample(labels, len(labels))
            orders.append({"concurrency": c, "round": r, "order": order})
            for a in order:
                if own_deadline[a, c] > 0:
                    outcome = await arm_round(a, c, r, own_deadline[a, c])
                    own_deadline[a, c] -= outcome.duration_s
                    per_level[a][c].append(_every_request_counted(outcome, len(plan[c][a][r])))
                else:  # this arm's time for the level ran out: its round's requests are cut off
                    per_level[a][c].append(RunOutcome([], 0.0, len(plan[c][a][r])))

        # as run_benchmark: rounds, the levels taking turns; a round runs on all arms at once (concurrent) or
        # on each arm alone, in a fresh random order (interleaved)
        for r in range(max(len(plan[c][labels[0]]) for c in levels_wanted)):
            for c in levels_wanted:
                if r < len(plan[c][labels[0]]) and design == INTERLEAVED:
                    await alone(c, r)
                elif r < len(plan[c][labels[0]]) and deadline[c] > 0:
                    outcomes = await asyncio.gather(*(arm_round(a, c, r, deadline[c]) for a in labels))
                    deadline[c] -= max(o.duration_s for o in outcomes)
                    for a, outcome in zip(labels, outcomes):
                        per_level[a][c].append(_every_request_counted(outcome, len(plan[c][a][r])))
                elif r < len(plan[c][labels[0]]):  # the level's time ran out: this round's requests are cut off
                    for a in labels:
                        per_level[a][c].append(RunOutcome([], 0.0, len(plan[c][a][r])))
    results: dict[str, dict[str, Any]] = {}
    for a in labels:
        levels = [{**_level_result(c, per_level[a][c], slos=slos, monitor=monitors.get(a)),
                   "scale": arms[a].scale} for c in levels_wanted]
        results[a] = {"arm": a, **_result(
            model=gens[a].model, endpoint=gens[a].root, api=api, stream=stream, started=started, spec=spec,
            sizing=sizing, requests_per_level=requests_per_level, max_seconds_per_level=max_seconds_per_level,
            warmup_requests=warmup_requests, per_level=per_level[a], levels=levels, slos=slos),
            "design": {"name": design, "arms": labels, "seed": seed,
                       **({"orders": orders} if design == INTERLEAVED else {})}}
    if progress is not None:
        total = sum(lv["requests"] for res in results.values() for lv in res["levels"])
        progress(f"side-by-side benchmark done ({design}): {total} requests on {len(labels)} arms in "
                 f"{time.perf_counter() - t0:.1f}s")
    return results


def run_side_by_side(
    arms: Mapping[str, Arm],
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
    metrics: bool = True,
    slos: Mapping[str, float | None] | None = None,
    sweep: Mapping[str, Any] | None = None,
    engine_metrics: bool | None = None,
    design: str = CONCURRENT,
    seed: int | None = None,
) -> dict[str, dict[str, Any]]:
    """Benchmark several endpoints (``arms``: label → :class:`Arm`) in the same time window: a canary beside
    the app it would replace. One result per label, each shaped as :func:`run_benchmark`'s.

    Every level's requests are :func:`run_benchmark`'s (the same seeded, sized prompts, the same rounds).
    ``design`` :data:`CONCURRENT`: each round runs on all arms at once (``asyncio.gather``), so whatever slows the
    machine meanwhile slows every arm (arms on their own devices or hosts). :data:`INTERLEAVED`: each round runs on
    one arm at a time, alone, in a fresh random order each round (``seed`` seeds it; each result's ``design``
    keeps the orders), each arm with its own time bound per level: arms that share a host never load it together,
    and a slow spell falls on whichever arm it meets, not always the same one. An arm at ``scale`` k runs at k × the level's concurrency and sends k × its requests: each
    round's shared requests and, after each, k − 1 more from the same seeded stream (the same for every
    arm at that scale). Levels stay labelled with the unscaled concurrency (and carry ``scale``), so
    :func:`raylift.measure.judgement.judge` compares arms level by level. A level's time bound
    (``max_seconds_per_level``) is shared: a round the slower arm ends takes its time from both. Prompts
    are sized by the first arm's tokenizer. With ``metrics`` (the default) each level carries each arm's
    ``engine_metrics`` (:mod:`raylift.measure.engine_metrics`; ``engine_metrics``, :func:`run_benchmark`'s name
    for the switch, wins when given); with ``slos`` its ``goodput``. No sweep (``sweep`` is refused), so
    no sweep stop rule either.

    :raises EndpointNotAllowedError: an arm's URL is not loopback and ``allow_remote`` is False.
    :raises RayliftValueError: no arms, bad levels, a bad scale, or a ``sweep``.
    """
    return asyncio.run(arun_side_by_side(
        arms, model, profile=profile, concurrency=concurrency, requests_per_level=requests_per_level,
        max_seconds_per_level=max_seconds_per_level, api=api, stream=stream, allow_remote=allow_remote,
        progress=progress, max_rounds=max_rounds, size_prompts_by_tokenizer=size_prompts_by_tokenizer,
        warmup_requests=warmup_requests, metrics=metrics, slos=slos, sweep=sweep,
        engine_metrics=engine_metrics, design=design, seed=seed))


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
