"""An asyncio load generator for OpenAI-compatible endpoints (``/v1/completions``, ``/v1/chat/completions``).

Requests go over :class:`~raylift.measure.http1.Http1Client`, one kept-alive connection per request in
flight, opened before a timed run starts. A request's clock starts when its bytes reach the socket;
every read is timestamped on arrival, before it is parsed; only the ``data:`` lines are decoded, and
JSON only where usage or an error may be. So the client's own cost stays out of TTFT and ITL even
with many streams starting and ticking at once.

Output length is pinned with ``max_tokens`` plus vLLM's ``min_tokens`` and ``ignore_eos``; servers
that do not know those two fields ignore them (the token counts then come from ``usage``).

Every run is bounded twice: by a request count and by wall time. Endpoints off the loopback
interface are refused unless the caller passes ``allow_remote=True``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from raylift.errors import EndpointNotAllowedError, RayliftValueError
from raylift.measure.http1 import Http1Client, HttpError
from raylift.measure.metrics import RequestRecord, summarize
from raylift.measure.profiles import RequestProfile, RequestSpec, generate_requests

# how long requests cut off at a level's time bound get to finish being cancelled
CANCEL_GRACE_S = 10.0
log = logging.getLogger(__name__)

Api = Literal["chat", "completions"]
ProgressFn = Callable[[str], None]
Tokenizer = Callable[[str], int]

API_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
_DATA = b"data:"
_DONE = b"[DONE]"
# Fast path: a content chunk is recognised by its first content character, without decoding the JSON.
# Chunks that may carry usage or an error, and every chunk when a tokenizer needs the text, are decoded.
_CONTENT = {
    "chat": re.compile(rb'"(?:content|reasoning_content|reasoning)":\s*"(.)'),
    "completions": re.compile(rb'"text":\s*"(.)'),
}
_NEEDS_JSON = re.compile(rb'"usage":\s*\{|"error"')


def check_endpoint(base_url: str, *, allow_remote: bool = False) -> str:
    """The endpoint's root URL (no trailing ``/`` or ``/v1``), after refusing non-loopback hosts.

    :raises EndpointNotAllowedError: the host is not loopback and ``allow_remote`` is False.
    """
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RayliftValueError(f"benchmark endpoint {base_url!r} is not an http(s) URL with a host")
    host = parts.hostname.lower()
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_remote:
        raise EndpointNotAllowedError(
            f"refusing to send benchmark traffic to {host!r}: only 127.0.0.1, localhost and ::1 are "
            "allowed by default; pass allow_remote=True for an endpoint you own (a cloud target's URL)"
        )
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


@dataclass
class RunOutcome:
    """The records of one bounded run, its wall time and how many requests the time bound cut off."""

    records: list[RequestRecord]
    duration_s: float
    cancelled: int

    def summary(self) -> dict[str, Any]:
        return summarize(self.records, self.duration_s, cancelled=self.cancelled)


class _Progress:
    """Calls ``progress`` with one short line after every ``every`` finished requests."""

    def __init__(self, progress: ProgressFn | None, label: str, total: int, every: int | None) -> None:
        self.progress, self.label, self.total = progress, label, total
        self.every = every or max(1, total // 4)
        self.done = self.errors = 0
        self.t0 = time.perf_counter()

    def add(self, record: RequestRecord) -> None:
        self.done += 1
        self.errors += record.error is not None
        if self.progress is not None and (self.done % self.every == 0 or self.done == self.total):
            elapsed = time.perf_counter() - self.t0
            self.progress(
                f"{self.label}: {self.done}/{self.total} requests, {self.errors} errors, {elapsed:.1f}s"
            )


class LoadGenerator:
    """Sends request specs to one endpoint; use as ``async with LoadGenerator(...) as gen``.

    :param base_url: endpoint root, e.g. ``http://127.0.0.1:8000`` (a trailing ``/v1`` is accepted).
    :param api: ``"chat"`` or ``"completions"``.
    :param stream: stream the response (SSE, with ``stream_options.include_usage``) or not.
    :param tokenizer: counts output tokens from text when the server sends no ``usage``.
    :param headers: extra headers, e.g. ``Authorization``; never logged.
    :param max_connections: size of the connection pool; at least the highest concurrency used.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api: Api = "chat",
        stream: bool = True,
        allow_remote: bool = False,
        tokenizer: Tokenizer | None = None,
        headers: dict[str, str] | None = None,
        request_timeout_s: float = 600.0,
        max_connections: int = 256,
        temperature: float | None = 0.0,
    ) -> None:
        if api not in API_PATHS:
            raise RayliftValueError(f"benchmark api {api!r} is not one of {sorted(API_PATHS)}")
        self.root = check_endpoint(base_url, allow_remote=allow_remote)
        self.model, self.api, self.stream = model, api, stream
        self.tokenizer, self.temperature = tokenizer, temperature
        self._prefix = urlsplit(self.root).path.rstrip("/")  # an endpoint mounted under a path
        self.path = self._prefix + API_PATHS[api]
        self.url = self.root + API_PATHS[api]
        self._headers = dict(headers or {})
        self.request_timeout_s = request_timeout_s
        self._max_connections = max_connections
        self._slots = asyncio.Semaphore(max_connections)
        self._client: Http1Client | None = None

    async def __aenter__(self) -> LoadGenerator:
        self._client = Http1Client(self.root, headers=self._headers,
                                   connect_timeout_s=min(30.0, self.request_timeout_s))
        await self._warm_up()
        return self

    async def _warm_up(self) -> None:
        """One untimed ``GET /v1/models``: checks the endpoint answers, and opens the first connection."""
        assert self._client is not None
        try:
            async with asyncio.timeout(10.0):
                client = self._client
                _, response = await client.request(client.encode("GET", self._prefix + "/v1/models"))
                await client.read(response)
        except (HttpError, TimeoutError) as exc:
            log.debug("warm-up GET /v1/models failed (%s); timing goes on", type(exc).__name__)

    async def __aexit__(self, *exc: object) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def open_connections(self, count: int) -> None:
        """Open up to ``count`` idle connections now, so a timed run does not pay for them."""
        if self._client is None:
            raise RuntimeError("LoadGenerator.open_connections() outside 'async with LoadGenerator(...)'")
        try:
            await self._client.prefill(min(count, self._max_connections))
        except HttpError as exc:  # the requests themselves will fail and be counted
            log.warning("could not open %d connections before the run: %s", count, exc)

    async def post_json(self, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
        """An untimed JSON POST to ``path`` under the endpoint (e.g. ``/tokenize``): (status, parsed body,
        or None when it is not JSON). Transport errors raise :class:`OSError`/:class:`TimeoutError`."""
        client = self._client
        if client is None:
            raise RuntimeError("LoadGenerator.post_json() outside 'async with LoadGenerator(...)'")
        try:
            async with asyncio.timeout(min(30.0, self.request_timeout_s)):
                _, response = await client.request(client.encode("POST", self._prefix + path,
                                                                 json.dumps(payload).encode()))
                data = await client.read(response)
        except HttpError as exc:
            raise OSError(f"POST {path}: {exc}") from exc
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, None

    def body(self, spec: RequestSpec) -> bytes:
        """The JSON request body for one spec."""
        payload: dict[str, Any] = {"model": self.model}
        if self.api == "chat":
            payload["messages"] = [{"role": "user", "content": spec.prompt}]
        else:
            payload["prompt"] = spec.prompt
        payload.update(max_tokens=spec.output_tokens, min_tokens=spec.output_tokens, ignore_eos=True)
        if self.temperature is not None:
            payload["temperature"] = self.temperature
        payload["stream"] = self.stream
        if self.stream:
            payload["stream_options"] = {"include_usage": True}
        return json.dumps(payload).encode()

    async def send(self, spec: RequestSpec) -> RequestRecord:
        """Send one request and record its timings; failures become ``record.error``, never exceptions."""
        client = self._client
        if client is None:
            raise RuntimeError("LoadGenerator.send() outside 'async with LoadGenerator(...)'")
        raw = client.encode("POST", self.path, self.body(spec))
        record = RequestRecord(
            start_ns=time.perf_counter_ns(),  # replaced by the moment the bytes reach the socket
            target_input_tokens=spec.input_tokens,
            prompt_tokens=spec.prompt_tokens,
            target_output_tokens=spec.output_tokens,
            streamed=self.stream,
        )
        try:
            async with self._slots, asyncio.timeout(self.request_timeout_s):
                record.start_ns, response = await client.request(raw)
                try:
                    if response.status >= 400:
                        text = (await client.read(response))[:300].decode(errors="replace")
                        record.error = f"HTTP {response.status}: {text}"
                    elif self.stream:
                        async with contextlib.aclosing(client.body(response)) as pieces:
                            await self._read_stream(pieces, record)
                    else:
                        last_ns, data = response.head_ns, []
                        async for last_ns, piece in client.body(response):
                            data.append(piece)
                        self._read_body(b"".join(data), record)
                        record.end_ns = last_ns
                finally:
                    client.close(response)
        except TimeoutError:
            record.error = f"timeout: no complete response within {self.request_timeout_s:g}s"
        except HttpError as exc:
            record.error = f"{type(exc).__name__}: {exc}"
        except ValueError as exc:  # malformed JSON in the response
            record.error = f"bad response: {exc}"
        if record.error is not None or not record.end_ns:
            record.end_ns = time.perf_counter_ns()
        if record.error is None and record.output_tokens == 0 and not record.content_ns:
            record.error = "empty response: no output tokens"
        return record

    async def _read_stream(self, pieces: AsyncIterator[tuple[int, bytes]], record: RequestRecord) -> None:
        """Walk the SSE lines; each content event gets the arrival time of the read that completed it."""
        chat = self.api == "chat"
        content_re, needs_json = _CONTENT[self.api].search, _NEEDS_JSON.search
        texts: list[str] | None = [] if self.tokenizer is not None else None
        content_ns = record.content_ns
        usage: dict[str, Any] | None = None
        buffer = b""
        now = 0
        done = False
        async for now, data in pieces:
            buffer += data
            if b"\n" not in data:
                continue
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.startswith(_DATA):
                    continue
                payload = line[5:].strip()
                if payload == _DONE:
                    done = True
                if not payload or done:
                    continue
                if texts is None and needs_json(payload) is None:
                    found = content_re(payload)
                    if found is not None and found.group(1) != b'"':
                        content_ns.append(now)
                    continue
                event = json.loads(payload)
                if event.get("error"):
                    record.error = f"stream error: {str(event['error'])[:200]}"
                    return
                choices = event.get("choices")
                if choices:
                    choice = choices[0]
                    if chat:
                        delta = choice.get("delta") or {}
                        piece = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                    else:
                        piece = choice.get("text")
                    if piece:
                        content_ns.append(now)
                        if texts is not None:
                            texts.append(piece)
                if event.get("usage"):
                    usage = event["usage"]
        record.end_ns = now
        if not done:  # a replica that died mid-stream: the proxy may still end the body cleanly
            record.error = "truncated stream: the body ended without 'data: [DONE]'"
            return
        if content_ns:
            record.first_content_ns = content_ns[0]
        self._count_tokens(record, usage, "".join(texts) if texts is not None else None, len(content_ns))

    def _read_body(self, data: bytes, record: RequestRecord) -> None:
        event = json.loads(data)
        choices = event.get("choices") or [{}]
        if self.api == "chat":
            text = (choices[0].get("message") or {}).get("content") or ""
        else:
            text = choices[0].get("text") or ""
        self._count_tokens(record, event.get("usage"), text if self.tokenizer else None, 1 if text else 0)

    def _count_tokens(
        self, record: RequestRecord, usage: dict[str, Any] | None, text: str | None, chunks: int
    ) -> None:
        if usage and usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
            record.token_source = "usage"
        elif self.tokenizer is not None and text is not None:
            record.output_tokens = int(self.tokenizer(text))
            record.token_source = "tokenizer"
        else:
            record.output_tokens = chunks
            record.token_source = "chunks"
        if usage and usage.get("prompt_tokens") is not None:
            record.input_tokens = int(usage["prompt_tokens"])

    async def run_concurrency(
        self,
        specs: Sequence[RequestSpec],
        concurrency: int,
        *,
        max_seconds: float,
        progress: ProgressFn | None = None,
        progress_every: int | None = None,
    ) -> RunOutcome:
        """Keep ``concurrency`` requests in flight until ``specs`` are all sent or ``max_seconds`` pass.

        At the time bound, requests still in flight are cancelled and counted in ``cancelled``.
        """
        if concurrency < 1:
            raise RayliftValueError(f"concurrency must be at least 1, got {concurrency}")
        records: list[RequestRecord] = []
        tracker = _Progress(progress, f"concurrency {concurrency}", len(specs), progress_every)
        next_index = 0
        await self.open_connections(min(concurrency, len(specs)))
        deadline = time.perf_counter() + max_seconds

        async def worker() -> None:
            nonlocal next_index
            while next_index < len(specs) and time.perf_counter() < deadline:
                spec = specs[next_index]
                next_index += 1
                record = await self.send(spec)
                records.append(record)
                tracker.add(record)

        start_ns = time.perf_counter_ns()
        tasks = [asyncio.create_task(worker()) for _ in range(min(concurrency, len(specs)))]
        return await self._finish(tasks, records, start_ns, max_seconds, lambda: next_index)

    async def run_rate(
        self,
        specs: Sequence[RequestSpec],
        rate: float,
        *,
        max_seconds: float,
        arrival: Literal["poisson", "constant"] = "poisson",
        seed: int = 0,
        max_concurrency: int | None = None,
        progress: ProgressFn | None = None,
        progress_every: int | None = None,
    ) -> RunOutcome:
        """Start requests at ``rate`` per second (Poisson or evenly spaced arrivals).

        With ``max_concurrency``, an arrival waits for a free slot and its latency clock starts when it
        gets one (as ``vllm bench serve --max-concurrency``).
        """
        if rate <= 0:
            raise RayliftValueError(f"request rate must be positive, got {rate}")
        if arrival not in ("poisson", "constant"):
            raise RayliftValueError(f"arrival {arrival!r} is not 'poisson' or 'constant'")
        rng = random.Random(seed)
        slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        records: list[RequestRecord] = []
        tracker = _Progress(progress, f"rate {rate:g}/s", len(specs), progress_every)
        tasks: list[asyncio.Task[None]] = []
        started = 0
        if max_concurrency:
            await self.open_connections(min(max_concurrency, len(specs)))

        async def one(spec: RequestSpec) -> None:
            if slots is None:
                record = await self.send(spec)
            else:
                async with slots:
                    record = await self.send(spec)
            records.append(record)
            tracker.add(record)

        start_ns = time.perf_counter_ns()
        t0 = time.perf_counter()
        deadline = t0 + max_seconds
        next_at = t0
        for spec in specs:
            if next_at >= deadline:
                break
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(spec)))
            started += 1
            next_at += rng.expovariate(rate) if arrival == "poisson" else 1.0 / rate
        remaining = max(0.0, deadline - time.perf_counter())
        return await self._finish(tasks, records, start_ns, remaining, lambda: started)

    @staticmethod
    async def _finish(
        tasks: list[asyncio.Task[None]],
        records: list[RequestRecord],
        start_ns: int,
        timeout: float,  # noqa: ASYNC109 - a deadline shared by the tasks already started, not a call's timeout
        issued: Callable[[], int],
    ) -> RunOutcome:
        pending: set[asyncio.Task[None]] = set()
        if tasks:
            done, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:  # bounded: a cancel swallowed by Python 3.11's wait_for must not hold the run
                await asyncio.wait(pending, timeout=CANCEL_GRACE_S)
            for task in done:
                task.result()  # a bug in a worker must surface, not vanish
        duration_s = (time.perf_counter_ns() - start_ns) / 1e9
        return RunOutcome(records, duration_s, cancelled=issued() - len(records))

    async def sweep(
        self,
        profile: RequestProfile,
        *,
        start: int = 1,
        factor: int = 2,
        max_concurrency: int = 128,
        requests_per_level: int | None = None,
        max_seconds_per_level: float = 120.0,
        min_gain: float = 0.05,
        max_error_rate: float = 0.05,
        progress: ProgressFn | None = None,
    ) -> dict[str, Any]:
        """Raise concurrency (×``factor``) until throughput gains less than ``min_gain`` over the level
        before, the error rate exceeds ``max_error_rate``, or ``max_concurrency`` is reached.

        ``requests_per_level`` defaults to ``max(16, 4 × concurrency)`` (:func:`raylift.measure.sweep.level_requests`). Returns the levels, why the
        sweep stopped, and the concurrency with the highest throughput within the error bound.
        """
        from raylift.measure.sweep import SweepSpec, level_requests, stop_reason, verdict

        spec = SweepSpec(start=start, factor=factor, max_concurrency=max_concurrency, min_gain=min_gain)

        def breach(level: Any) -> str | None:
            rate = level["error_rate"]
            return f"error rate {rate:.1%} > {max_error_rate:.1%}" if rate > max_error_rate else None

        levels: list[dict[str, Any]] = []
        for concurrency in spec.levels():
            count = requests_per_level or level_requests(16, concurrency)
            specs = generate_requests(profile, count, seed_offset=concurrency)
            outcome = await self.run_concurrency(
                specs, concurrency, max_seconds=max_seconds_per_level, progress=progress
            )
            levels.append({"concurrency": concurrency, **outcome.summary()})
            reason = stop_reason(levels, spec, breach)
            if reason:
                break
        result = verdict(levels, spec, str(reason), breach)
        return {"levels": levels, "stop_reason": reason, "saturation_concurrency": result["best_concurrency"],
                "knee_concurrency": result["knee_concurrency"]}
