"""raylift's own HTTP/1.1 client (raylift.measure.http1) against aiohttp, inside the same load generator.

Why this exists: ``http1.py`` is 500 lines that a library could replace. It was measured against httpx only;
this measures it against aiohttp, on the stub server that reports the delays it really produced (``GET /stats``:
write time minus the kernel's receive time, per request). Each client drives the same ``LoadGenerator``
(``AiohttpClient`` below gives aiohttp the interface the generator uses), rounds alternate between the two,
and for each round the script records how far the client's TTFT and ITL (p50, mean) are from what the stub
did, plus the client's CPU per streamed token. Keep http1 only if it measures closer at the tested
concurrencies. Writes bench/results/http_client_accuracy.json.

    .cache/venvs/control/bin/python bench/http_client_accuracy.py [--rounds 3] [--concurrency 1 16 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import statistics
import sys
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from raylift.measure.loadgen import LoadGenerator  # noqa: E402
from raylift.measure.metrics import distribution  # noqa: E402
from raylift.measure.profiles import RequestProfile, generate_requests  # noqa: E402
from tests.harness.stub_server import running_stub  # noqa: E402

INJECTED = {"ttft_ms": 200.0, "itl_ms": 40.0}
OUTPUT_TOKENS = 24


@dataclass
class AiohttpResponse:
    """What the load generator reads of a response: status, headers, when the head arrived."""

    status: int
    headers: dict[str, str]
    head_ns: int
    raw: Any = field(repr=False)


class AiohttpClient:
    """aiohttp behind the interface LoadGenerator uses (encode/request/body/read/close/prefill/aclose).

    The request clock starts just before ``session.request`` is awaited; each body piece is stamped when
    aiohttp hands it over (``iter_any``), as any aiohttp-based client (llmperf's, guidellm's) does.
    """

    def __init__(self, root: str, *, headers: dict[str, str] | None = None, connect_timeout_s: float = 30.0) -> None:
        import aiohttp

        self.root = root.rstrip("/")
        self._session = aiohttp.ClientSession(
            headers=headers or {},
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s),
            auto_decompress=True,
        )

    def encode(self, method: str, path: str, body: bytes = b"", content_type: str = "application/json") -> tuple:
        return method, path, body, content_type

    async def request(self, raw: tuple) -> tuple[int, AiohttpResponse]:
        method, path, body, content_type = raw
        start_ns = time.perf_counter_ns()
        reply = await self._session.request(method, self.root + path, data=body or None,
                                            headers={"Content-Type": content_type} if body else None)
        return start_ns, AiohttpResponse(reply.status, dict(reply.headers), time.perf_counter_ns(), reply)

    async def body(self, response: AiohttpResponse) -> AsyncGenerator[tuple[int, bytes], None]:
        try:
            async for data in response.raw.content.iter_any():
                yield time.perf_counter_ns(), data
        finally:
            response.raw.release()

    async def read(self, response: AiohttpResponse) -> bytes:
        return b"".join([data async for _, data in self.body(response)])

    def close(self, response: AiohttpResponse) -> None:
        response.raw.close()

    async def prefill(self, count: int) -> None:
        """aiohttp opens connections on demand; nothing to open ahead."""

    async def aclose(self) -> None:
        await self._session.close()


class AiohttpLoadGenerator(LoadGenerator):
    """The same load generator, reading through aiohttp."""

    async def __aenter__(self) -> AiohttpLoadGenerator:
        self._client = AiohttpClient(self.root, headers=self._headers)  # type: ignore[assignment]
        await self._warm_up()
        return self


async def one_round(kind: str, url: str, concurrency: int) -> dict[str, Any]:
    cls = LoadGenerator if kind == "http1" else AiohttpLoadGenerator
    profile = RequestProfile("acc", 16, 0, OUTPUT_TOKENS, 0)
    async with cls(url, "stub") as gen:
        await gen.run_concurrency(generate_requests(profile, concurrency, seed_offset=1), concurrency, max_seconds=60)
        httpx.get(f"{url}/stats", timeout=5)  # noqa: ASYNC210 - nothing in flight; forget the untimed round
        before = resource.getrusage(resource.RUSAGE_SELF)
        outcome = await gen.run_concurrency(generate_requests(profile, 4 * concurrency), concurrency, max_seconds=120)
        after = resource.getrusage(resource.RUSAGE_SELF)
    stub = httpx.get(f"{url}/stats", timeout=5).json()  # noqa: ASYNC210 - the round is over
    summary = outcome.summary()
    achieved = {m: distribution(stub[m]) for m in INJECTED}
    error = {f"{m}_{s}": round(summary[m][s] - achieved[m][s], 3) for m in INJECTED for s in ("p50", "mean")}
    tokens = sum(r.output_tokens or 0 for r in outcome.records) or 1
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "client": kind, "concurrency": concurrency, "errors": summary["errors"],
        "measured": {m: {s: round(summary[m][s], 3) for s in ("p50", "mean")} for m in INJECTED},
        "stub_achieved": {m: {s: round(achieved[m][s], 3) for s in ("p50", "mean")} for m in INJECTED},
        "error_ms": error, "client_cpu_ms_per_1k_tokens": round(cpu_s * 1e6 / tokens, 1),
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    with running_stub("--ttft-ms", str(INJECTED["ttft_ms"]), "--itl-ms", str(INJECTED["itl_ms"])) as url:
        for concurrency in args.concurrency:
            for r in range(args.rounds):
                order = ("http1", "aiohttp") if r % 2 == 0 else ("aiohttp", "http1")  # alternate who goes first
                for kind in order:
                    row = asyncio.run(one_round(kind, url, concurrency))
                    row["round"] = r
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    summary: dict[str, Any] = {}
    for concurrency in args.concurrency:
        per: dict[str, Any] = {}
        for kind in ("http1", "aiohttp"):
            mine = [r for r in rows if r["client"] == kind and r["concurrency"] == concurrency]
            per[kind] = {
                "median_abs_error_ms": {k: round(statistics.median(abs(r["error_ms"][k]) for r in mine), 3)
                                        for k in mine[0]["error_ms"]},
                "client_cpu_ms_per_1k_tokens": statistics.median(r["client_cpu_ms_per_1k_tokens"] for r in mine),
                "errors": sum(r["errors"] for r in mine),
            }  # fmt: skip
        summary[str(concurrency)] = per
    out = {
        "what": "load generator accuracy: raylift's http1 client vs aiohttp, same LoadGenerator, same stub",
        "injected_ms": INJECTED, "output_tokens": OUTPUT_TOKENS, "rounds": args.rounds, "rows": rows,
        "summary": summary, "machine": platform.platform(), "load_avg_1m_at_end": round(__import__("os").getloadavg()[0], 2),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    path = ROOT / "bench" / "results" / "http_client_accuracy.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
