"""A saturation sweep: raise concurrency until throughput stops growing or an SLO breaks, then name the knee.

The rule is one place for both callers (:meth:`raylift.measure.loadgen.LoadGenerator.sweep` and the benchmark
runner's sweep mode): level after level (``start``, ×``factor``, up to ``max_concurrency``), stop at the first
level whose output tokens/s grew less than ``min_gain`` over the level before, or that breaks an SLO. The
**knee** is the lowest concurrency that reached the sweep's best throughput within ``min_gain``: more
concurrency beyond it buys latency, not tokens. The **best** level has the highest throughput among the
levels that kept the SLOs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from raylift.errors import RayliftValueError

# level summary -> why it breaks an SLO (None: it keeps them)
Breach = Callable[[Mapping[str, Any]], "str | None"]
# A level sends at least this many requests per concurrent stream: with fewer requests than streams a level
# cannot load the server more than the one before, and its "gain" is noise (seen: 16 requests at 16, 32 and
# 64 streams read 803, 950 and 821 tokens/s, so a sweep on 2 cores climbed to 64 on noise).
REQUESTS_PER_STREAM = 4


def level_requests(requests_per_level: int, concurrency: int) -> int:
    """How many requests a sweep level sends: the asked number, or enough to keep every stream busy."""
    return max(requests_per_level, REQUESTS_PER_STREAM * concurrency)


@dataclass(frozen=True)
class SweepSpec:
    """How a sweep climbs: from ``start``, times ``factor``, at most ``max_concurrency``; it stops when a level
    gains less than ``min_gain`` (a fraction) in output tokens/s over the one before."""

    start: int = 1
    factor: int = 2
    max_concurrency: int = 64
    min_gain: float = 0.05

    def __post_init__(self) -> None:
        if self.start < 1 or self.factor < 2 or self.max_concurrency < self.start or not 0 <= self.min_gain < 1:
            raise RayliftValueError(
                f"sweep {asdict(self)}: needs start >= 1, factor >= 2, max_concurrency >= start and "
                "0 <= min_gain < 1, e.g. {\"max_concurrency\": 32, \"min_gain\": 0.05}"
            )

    @classmethod
    def from_param(cls, value: Mapping[str, Any] | None) -> SweepSpec | None:
        """The sweep Param: ``{}``/None is no sweep; unknown keys are refused."""
        if not value:
            return None
        unknown = set(value) - {f.name for f in fields(cls)}
        if unknown:
            raise RayliftValueError(f"sweep has unknown keys {sorted(unknown)}; allowed: "
                                    f"{[f.name for f in fields(cls)]}")
        return cls(**value)

    def levels(self) -> list[int]:
        """Every concurrency the sweep may reach, in order."""
        out, c = [], self.start
        while True:
            out.append(c)
            if c >= self.max_concurrency:
                return out
            c = min(self.max_concurrency, c * self.factor)


def stop_reason(levels: Sequence[Mapping[str, Any]], spec: SweepSpec, breach: Breach | None = None) -> str | None:
    """Why the sweep stops after the last of ``levels`` (summaries with ``concurrency`` and
    ``output_tokens_per_s``), or None to go on."""
    last = levels[-1]
    c = last["concurrency"]
    broken = breach(last) if breach is not None else None
    if broken:
        return f"SLO broken at concurrency {c}: {broken}"
    if len(levels) > 1:
        before = levels[-2]["output_tokens_per_s"]
        gain = last["output_tokens_per_s"] / before - 1 if before else 0.0
        if gain < spec.min_gain:
            return f"throughput gain {gain:+.1%} < {spec.min_gain:.0%} at concurrency {c}"
    if c >= spec.max_concurrency:
        return f"reached max concurrency {spec.max_concurrency}"
    return None


def verdict(levels: Sequence[Mapping[str, Any]], spec: SweepSpec, reason: str,
            breach: Breach | None = None) -> dict[str, Any]:
    """The knee, the best level and why the sweep stopped (see the module docstring)."""
    kept = [lv for lv in levels if breach is None or not breach(lv)] or list(levels)
    best = max(kept, key=lambda lv: lv["output_tokens_per_s"])
    top = best["output_tokens_per_s"]
    knee = min((lv for lv in kept if lv["output_tokens_per_s"] >= top / (1 + spec.min_gain)),
               key=lambda lv: lv["concurrency"])
    return {"spec": asdict(spec), "stop_reason": reason, "knee_concurrency": knee["concurrency"],
            "best_concurrency": best["concurrency"], "best_output_tokens_per_s": top,
            "levels": [lv["concurrency"] for lv in levels]}
