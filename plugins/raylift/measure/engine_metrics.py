"""vLLM's engine state while a benchmark level runs: its Prometheus ``/metrics``, sampled.

The LLM app serves vLLM's own OpenAI server app (``serve_apps/llm/app.py``), ``/metrics`` included, under
the app's route prefix: ``<base_url>/metrics``. While a level's rounds run, :class:`EngineMonitor` scrapes
it just before each round, every ``interval_s`` while it runs and once more when it ends, and keeps the series vLLM 0.32 exports
(``vllm/v1/metrics/loggers.py``):

- ``vllm:num_requests_waiting``, ``vllm:num_requests_running`` (gauges; summed over the engines of a
  replica, i.e. over the ``engine`` label);
- ``vllm:kv_cache_usage_perc`` (gauge, a fraction: 1 is a full KV cache; vLLM's V0 engine called it
  ``vllm:gpu_cache_usage_perc``, read when the first is absent); averaged over engines;
- ``vllm:num_preemptions`` (a counter, exposed as ``vllm:num_preemptions_total``): its increase over the
  level, round by round (a counter that went down was reset: its new value is the increase).

A level's summary: the gauges' mean and max over the scrapes taken while its rounds ran (the scrapes before
and after a round read the counter only: the engine is idle then), the preemptions' increase, how many
scrapes were taken while the rounds ran and how many failed. An endpoint without vLLM's metrics (the tests' stub server,
llama.cpp) gives ``{"unavailable": reason}`` for every level and never fails the benchmark.

Behind a Serve app with several replicas each scrape reaches one replica, chosen by Serve's router, so
the figures are one replica's at a time: a per-replica average over the level, not the app's total.

The exposition text is cut down to the lines of those series before it is parsed (a vLLM scrape is
mostly histogram buckets), then parsed by ``prometheus_client``'s own text parser.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from raylift.measure.http1 import Http1Client, HttpError
from raylift.measure.loadgen import check_endpoint

log = logging.getLogger(__name__)

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")  # vLLM V1 (0.32), then V0's name
PREEMPTIONS = "vllm:num_preemptions_total"  # the sample name of the counter vllm:num_preemptions
SERIES = frozenset({WAITING, RUNNING, *KV_CACHE, PREEMPTIONS})
DEFAULT_INTERVAL_S = 0.5
SCRAPE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class EngineSample:
    """One scrape: the engine's gauges and the preemption counter (None: the series was not exported)."""

    at_s: float  # time.perf_counter()
    waiting: float | None = None
    running: float | None = None
    kv_cache: float | None = None
    kv_cache_metric: str | None = None
    preemptions: float | None = None

    @property
    def empty(self) -> bool:
        return self.waiting is None and self.running is None and self.kv_cache is None and self.preemptions is None


def _series_lines(text: str) -> str:
    """The lines of :data:`SERIES` only (HELP/TYPE lines and samples): what is parsed."""
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            name = parts[2] if len(parts) > 2 else ""
        else:
            name = line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""
        if name in SERIES:
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_sample(text: str, at_s: float = 0.0) -> EngineSample:
    """The engine figures in one Prometheus text exposition (gauges summed, KV-cache usage averaged over
    the series, i.e. the engines). :raises ValueError: the text is not an exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(_series_lines(text)):
        for sample in family.samples:
            if sample.name in SERIES and not math.isnan(sample.value):
                values.setdefault(sample.name, []).append(float(sample.value))
    kv_name = next((name for name in KV_CACHE if values.get(name)), None)
    return EngineSample(
        at_s=at_s,
        waiting=math.fsum(values[WAITING]) if WAITING in values else None,
        running=math.fsum(values[RUNNING]) if RUNNING in values else None,
        kv_cache=math.fsum(values[kv_name]) / len(values[kv_name]) if kv_name else None,
        kv_cache_metric=kv_name,
        preemptions=math.fsum(values[PREEMPTIONS]) if PREEMPTIONS in values else None,
    )


def _stat(values: Iterable[float | None]) -> dict[str, float | None]:
    data = [v for v in values if v is not None]
    if not data:
        return {"mean": None, "max": None}
    return {"mean": math.fsum(data) / len(data), "max": max(data)}


def counter_increase(readings: Sequence[float]) -> float:
    """The increase of a counter over successive readings; a reading below the one before is a reset
    (the process restarted), after which the counter counts from 0."""
    total = 0.0
    for before, after in zip(readings, readings[1:]):
        total += after - before if after >= before else after
    return total


@dataclass
class _Round:
    before: EngineSample | None  # scraped just before the round's requests went out
    during: list[EngineSample]  # while they ran
    end: EngineSample | None  # once they had all finished


def summarize_rounds(rounds: Sequence[_Round], *, interval_s: float, errors: int = 0) -> dict[str, Any]:
    """One level's summary from its rounds' scrapes (see the module docstring)."""
    during = [s for r in rounds for s in r.during]
    increases = []
    for r in rounds:
        counts = [s.preemptions for s in (r.before, *r.during, r.end) if s is not None and s.preemptions is not None]
        if counts:
            increases.append(counter_increase(counts))
    kv_names = sorted({s.kv_cache_metric for s in during if s.kv_cache_metric})
    return {
        "samples": len(during),
        "interval_s": interval_s,
        "scrape_errors": errors,
        "waiting": _stat(s.waiting for s in during),
        "running": _stat(s.running for s in during),
        "kv_cache_usage": _stat(s.kv_cache for s in during),
        "kv_cache_metric": ",".join(kv_names) or None,
        "preemptions": math.fsum(increases) if increases else None,
    }


class EngineMonitor:
    """Samples one endpoint's ``/metrics`` while benchmark rounds run; use as ``async with``.

    ``async with monitor.during(level): ...`` around each round; :meth:`summary` gives the level's figures.
    The first ``async with`` probes the endpoint: an endpoint without vLLM's metrics is marked unavailable
    there and never scraped again.

    :raises EndpointNotAllowedError: ``base_url`` is not loopback and ``allow_remote`` is False.
    """

    def __init__(self, base_url: str, *, allow_remote: bool = False, interval_s: float = DEFAULT_INTERVAL_S,
                 headers: Mapping[str, str] | None = None) -> None:
        self.root = check_endpoint(base_url, allow_remote=allow_remote)
        self.path = urlsplit(self.root).path.rstrip("/") + "/metrics"
        self.interval_s = interval_s
        self._headers = dict(headers or {})
        self._client: Http1Client | None = None
        self.unavailable: str | None = None
        self._rounds: dict[Any, list[_Round]] = {}
        self._errors: dict[Any, int] = {}

    async def __aenter__(self) -> EngineMonitor:
        self._client = Http1Client(self.root, headers=self._headers, connect_timeout_s=SCRAPE_TIMEOUT_S)
        try:
            sample = await self.scrape()
        except (OSError, HttpError, TimeoutError, ValueError) as exc:
            self.unavailable = f"GET {self.path}: {exc}"
        else:
            if sample.empty:
                self.unavailable = f"GET {self.path} exports none of vLLM's engine metrics ({', '.join(sorted(SERIES))})"
        if self.unavailable:
            log.info("engine metrics of %s unavailable: %s", self.root, self.unavailable)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def scrape(self) -> EngineSample:
        """One ``GET /metrics``, parsed. :raises HttpError, TimeoutError, ValueError, OSError: it failed."""
        client = self._client
        if client is None:
            raise RuntimeError("EngineMonitor.scrape() outside 'async with EngineMonitor(...)'")
        async with asyncio.timeout(SCRAPE_TIMEOUT_S):
            _, response = await client.request(client.encode("GET", self.path))
            body = await client.read(response)
        if response.status != 200:
            raise HttpError(f"HTTP {response.status}")
        return parse_sample(body.decode("utf-8", errors="replace"), time.perf_counter())

    async def _try_scrape(self, key: Any) -> EngineSample | None:
        try:
            return await self.scrape()
        except (OSError, HttpError, TimeoutError, ValueError) as exc:
            self._errors[key] = self._errors.get(key, 0) + 1
            log.debug("scraping %s failed: %s", self.path, exc)
            return None

    @contextlib.asynccontextmanager
    async def during(self, key: Any) -> AsyncIterator[None]:
        """Scrape before the block (a round of level ``key``), every ``interval_s`` while it runs, and after it."""
        if self.unavailable is not None or self._client is None:
            yield
            return
        # the counter's reading before the round (the engine idle: no gauge statistics from it), taken before
        # the block's requests start their clocks
        before = await self._try_scrape(key)
        scraped: list[EngineSample] = []
        # Stopped by a flag, not only by cancelling it: Python 3.11's asyncio.wait_for (the connect under a
        # scrape) can swallow a cancel that lands as the connect completes, and a loop that only a cancel ends
        # then scrapes for ever while the benchmark awaits it (seen: a canary benchmark stalled 12 min after a
        # round, make test here).
        stop = asyncio.Event()

        async def sample() -> None:
            while not stop.is_set():
                got = await self._try_scrape(key)
                if got is not None:
                    scraped.append(got)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval_s):
                        await stop.wait()

        task = asyncio.create_task(sample())
        try:
            yield
        finally:
            stop.set()
            task.cancel()
            await asyncio.wait({task}, timeout=SCRAPE_TIMEOUT_S + self.interval_s + 1)
        end = await self._try_scrape(key)  # the round finished: its counter's last reading
        self._rounds.setdefault(key, []).append(_Round(before, scraped, end))

    def summary(self, key: Any) -> dict[str, Any]:
        """Level ``key``'s engine figures, or ``{"unavailable": reason}``."""
        if self.unavailable is not None:
            return {"unavailable": self.unavailable}
        rounds = self._rounds.get(key, [])
        if not any(r.during for r in rounds):
            return {"unavailable": f"no scrape of {self.path} succeeded while this level ran",
                    "scrape_errors": self._errors.get(key, 0)}
        return summarize_rounds(rounds, interval_s=self.interval_s, errors=self._errors.get(key, 0))
