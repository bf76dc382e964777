"""Per-request measurements and their aggregates; definitions in ``docs/benchmark-metrics.md``.

All times are :func:`time.perf_counter_ns` values on the client, from just before the request's bytes
are handed to the socket until the read that brought the chunk in question arrived (the kernel's
receive time on plain TCP; see :mod:`raylift.measure.http1`).

- **TTFT**: start → first chunk that carries content (text or delta content). Role-only and empty
  chunks do not count. For a non-streamed request it equals the end-to-end latency.
- **ITL** (inter-token latency): the gaps between consecutive content chunks, TTFT excluded
  (``vllm bench serve``'s ITL). A chunk carrying several tokens gives one gap.
- **TPOT** (time per output token): ``(e2e − TTFT) / (output_tokens − 1)``; undefined for one token
  and for non-streamed requests.
- **e2e**: start → end of the response body.
- **Input tokens**: ``input_tokens`` is the server's ``usage.prompt_tokens`` (a chat template included);
  ``requested_input_tokens`` the profile's targets; ``sized_input_tokens`` the served tokenizer's count
  of the prompts sent (None for word prompts; see :mod:`raylift.measure.prompt_sizing`).
- **Output tokens**: the server's ``usage.completion_tokens``, else a tokenizer callback on the
  text, else the number of content chunks (see :class:`RequestRecord.token_source`).
- Per-request output tokens/s: ``output_tokens / e2e`` (llmperf's request_output_throughput).
- Level throughput: successful requests' output tokens / the level's wall time (first request sent
  → last response finished); requests/s likewise counts successful requests; error rate is
  errors / (successes + errors). Requests cut off by the level's time bound are counted apart.
- **Goodput** (DistServe's): the requests per second that finished without error AND met every per-request
  latency limit given (``ttft_ms``, ``tpot_ms``, ``e2e_ms``), over the level's wall time; ``share`` is
  those requests over all requests sent (errors and requests cut off by the time bound count as missed).
  See :func:`goodput` and :func:`goodput_slos` for how the benchmark's SLO keys become per-request limits.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raylift.config import DEFAULT_SLOS
from raylift.errors import RayliftValueError

PERCENTILES: tuple[int, ...] = (25, 50, 75, 90, 95, 99)
STAT_KEYS: tuple[str, ...] = ("mean",) + tuple(f"p{p}" for p in PERCENTILES)


@dataclass
class RequestRecord:
    """What one request did, as raw client timestamps (ns) and counts."""

    start_ns: int
    end_ns: int = 0
    first_content_ns: int | None = None
    content_ns: list[int] = field(default_factory=list)
    output_tokens: int = 0
    input_tokens: int | None = None
    target_input_tokens: int = 0
    prompt_tokens: int | None = None  # the served tokenizer's count of the prompt sent (None: word prompts)
    target_output_tokens: int = 0
    token_source: str = "chunks"  # "usage" | "tokenizer" | "chunks"
    streamed: bool = True
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def e2e_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def ttft_ms(self) -> float | None:
        if not self.streamed:
            return self.e2e_ms if self.ok else None
        if self.first_content_ns is None:
            return None
        return (self.first_content_ns - self.start_ns) / 1e6

    @property
    def tpot_ms(self) -> float | None:
        ttft = self.ttft_ms
        if not self.streamed or ttft is None or self.output_tokens < 2:
            return None
        return (self.e2e_ms - ttft) / (self.output_tokens - 1)

    def itl_ms(self) -> list[float]:
        times = self.content_ns
        return [(b - a) / 1e6 for a, b in zip(times, times[1:])]

    @property
    def output_tokens_per_s(self) -> float | None:
        return self.output_tokens / (self.e2e_ms / 1e3) if self.end_ns > self.start_ns else None


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, also pandas' and llmperf's)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    rank = (len(sorted_values) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


def distribution(values: Iterable[float]) -> dict[str, float | None]:
    """``{"mean", "p25", ... "p99"}`` of the values; every entry None when there are none."""
    data = sorted(values)
    if not data:
        return dict.fromkeys(STAT_KEYS)
    stats: dict[str, float | None] = {"mean": math.fsum(data) / len(data)}
    for p in PERCENTILES:
        stats[f"p{p}"] = percentile(data, p)
    return stats


def summarize(records: Sequence[RequestRecord], duration_s: float, *, cancelled: int = 0,
              slos: Mapping[str, float | None] | None = None) -> dict[str, Any]:
    """The aggregate of one run (a concurrency level, a rate, or everything) as a JSON-able dict; with
    ``slos`` (:func:`goodput_slos`' keys) also its ``goodput``."""
    ok = [r for r in records if r.ok]
    errors = len(records) - len(ok)
    output_tokens = sum(r.output_tokens for r in ok)
    sources = sorted({r.token_source for r in ok})
    error_kinds: dict[str, int] = {}
    for r in records:
        if r.error is not None:
            kind = r.error.split(":", 1)[0]
            error_kinds[kind] = error_kinds.get(kind, 0) + 1
    return {
        "requests": len(records),
        "errors": errors,
        "error_rate": errors / len(records) if records else 0.0,
        "cancelled": cancelled,
        "output_tokens": output_tokens,
        "input_tokens": sum(r.input_tokens or 0 for r in ok),
        "requested_input_tokens": sum(r.target_input_tokens for r in records),
        "sized_input_tokens": (sum(r.prompt_tokens for r in records if r.prompt_tokens is not None)
                               if any(r.prompt_tokens is not None for r in records) else None),
        "token_source": sources[0] if len(sources) == 1 else ",".join(sources) or None,
        "duration_s": duration_s,
        "requests_per_s": len(ok) / duration_s if duration_s > 0 else 0.0,
        "output_tokens_per_s": output_tokens / duration_s if duration_s > 0 else 0.0,
        "ttft_ms": distribution(t for r in ok if (t := r.ttft_ms) is not None),
        "itl_ms": distribution(g for r in ok for g in r.itl_ms()),
        "tpot_ms": distribution(t for r in ok if (t := r.tpot_ms) is not None),
        "e2e_ms": distribution(r.e2e_ms for r in ok),
        "request_output_tokens_per_s": distribution(
            t for r in ok if (t := r.output_tokens_per_s) is not None
        ),
        "error_kinds": error_kinds,
        **({"goodput": goodput(records, duration_s, slos, cancelled=cancelled)} if slos is not None else {}),
    }


SAMPLE_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s")


def samples(records: Sequence[RequestRecord], *, rounds: Sequence[Sequence[RequestRecord]] | None = None
            ) -> dict[str, Any]:
    """Each successful request's TTFT, TPOT, e2e and output tokens/s (request order, 4 significant
    digits), and the counts of successes and errors: what the regression judgement compares
    (:mod:`raylift.measure.judgement`) — a single number per level cannot tell noise from a change.

    With ``rounds`` (the same records, grouped by the round that sent them, in order), the lists are in
    round order and ``round_sizes`` gives each metric's count per round, so the judgement can take one
    observation per round."""
    groups = [list(g) for g in rounds] if rounds is not None else [list(records)]

    def column(values: Iterable[float | None]) -> list[float]:
        return [float(f"{v:.4g}") for v in values if v is not None]

    out: dict[str, Any] = {"ok": 0, "errors": 0, **{m: [] for m in SAMPLE_METRICS}}
    sizes: dict[str, list[int]] = {m: [] for m in SAMPLE_METRICS}
    for group in groups:
        ok = [r for r in group if r.ok]
        out["ok"] += len(ok)
        out["errors"] += len(group) - len(ok)
        for metric in SAMPLE_METRICS:
            values = column(getattr(r, metric) for r in ok)
            out[metric] += values
            sizes[metric].append(len(values))
    if rounds is not None:
        out["round_sizes"] = sizes
    return out


def wall_time_s(records: Sequence[RequestRecord]) -> float:
    """First request sent → last response finished, in seconds (0 when nothing finished)."""
    finished = [r for r in records if r.end_ns]
    if not finished:
        return 0.0
    return (max(r.end_ns for r in finished) - min(r.start_ns for r in finished)) / 1e9


GOODPUT_METRICS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "e2e_ms")
# The benchmark's SLO keys (raylift.release.gates.SLO_KEYS) that are per-request latency limits, and the
# metric each one limits. A level passes "TTFT p99 <= X" when 99 % of its requests meet TTFT <= X, so X is
# each request's TTFT limit. Throughput and error-rate SLOs are not per-request limits (errors never count
# as good requests anyway).
_SLO_LIMITS: dict[str, str] = {"max_ttft_p99_ms": "ttft_ms"}


def goodput_slos(slos: Mapping[str, float | None] | None) -> dict[str, float]:
    """Per-request latency limits in ms (``ttft_ms``, ``tpot_ms``, ``e2e_ms``) from ``slos``, which may use
    those keys or the benchmark's SLO keys (``max_ttft_p99_ms`` becomes ``ttft_ms``; the other benchmark
    keys set no per-request limit). A None value sets no limit.

    :raises RayliftValueError: an unknown key, or a limit that is not a positive number.
    """
    limits: dict[str, float] = {}
    for key, value in (slos or {}).items():
        if key in GOODPUT_METRICS:
            metric = key
        elif key in _SLO_LIMITS:
            metric = _SLO_LIMITS[key]
        elif key in DEFAULT_SLOS:
            continue
        else:
            raise RayliftValueError(f"unknown goodput SLO {key!r}; use {list(GOODPUT_METRICS)} or "
                                    f"{sorted(DEFAULT_SLOS)}")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise RayliftValueError(f"goodput SLO {key}={value!r} must be a positive number of ms")
        limits[metric] = min(float(value), limits.get(metric, math.inf))  # a key given both ways: the tighter
    return limits


def goodput(records_or_samples: Sequence[RequestRecord] | Mapping[str, Any], duration_s: float,
            slos: Mapping[str, float | None] | None, *, cancelled: int = 0) -> dict[str, Any]:
    """DistServe's goodput of one run: the successful requests that met every per-request limit in ``slos``
    (:func:`goodput_slos`), as a share of all requests sent and as a rate (per second of ``duration_s``).

    ``records_or_samples`` is the run's :class:`RequestRecord` list or a level's ``samples``
    (:func:`samples`: their lists follow the successful requests one to one unless a value was undefined,
    which the check below refuses). A request without a TPOT (one output token, or not streamed) has no
    decode phase and meets a TPOT limit; a streamed request without a TTFT misses a TTFT limit. Requests
    cut off by the time bound (``cancelled``) count as sent and missed.

    Returns ``{"slos", "requests", "good", "share", "goodput_rps", "met"}``; ``met`` counts the successful
    requests within each limit on its own. With samples whose lists cannot be lined up, ``{"slos",
    "unavailable": reason}``.
    """
    limits = goodput_slos(slos)
    rows: list[dict[str, float | None]]
    if isinstance(records_or_samples, Mapping):
        data = records_or_samples
        ok = int(data.get("ok", 0))
        errors = int(data.get("errors", 0))
        for metric in limits:
            if len(data.get(metric) or []) != ok:
                return {"slos": limits, "unavailable": (
                    f"{metric} has {len(data.get(metric) or [])} samples for {ok} successful requests: "
                    "they cannot be matched to requests")}
        rows = [{m: data[m][i] for m in limits} for i in range(ok)]
    else:
        ok_records = [r for r in records_or_samples if r.ok]
        ok = len(ok_records)
        errors = len(records_or_samples) - ok
        rows = [{m: getattr(r, m) for m in limits} for r in ok_records]

    def within(metric: str, value: float | None) -> bool:
        if value is None:
            return metric == "tpot_ms"
        return value <= limits[metric]

    met = {m: sum(within(m, row[m]) for row in rows) for m in limits}
    good = sum(all(within(m, row[m]) for m in limits) for row in rows)
    sent = ok + errors + cancelled
    return {
        "slos": limits,
        "requests": sent,
        "good": good,
        "share": good / sent if sent else 0.0,
        "goodput_rps": good / duration_s if duration_s > 0 else 0.0,
        "met": met,
    }
