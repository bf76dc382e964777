"""A stand-in OpenAI-compatible server on 127.0.0.1 with injected, known delays.

Raw HTTP/1.1 on non-blocking sockets in an asyncio loop (keep-alive, chunked SSE), run as its own
process so the client under test does not disturb its timing. A request's clock starts at the
kernel's receive time of its last bytes (``SO_TIMESTAMPNS``: before this process even woke up),
and every chunk is written by a timer set on that clock (absolute times: neither parsing nor timer
overshoot accumulates). Responses are built once per request shape. ``GET /stats`` returns the
TTFT and ITL the stub really produced since the last call (write time − receive time, per request),
so a test can tell a late stub (a busy machine) from a client that measures wrong.

Each streamed response sends its head and a role-only chunk at once, then ``max_tokens`` content
chunks, the first at ``ttft`` and each next one ``itl`` later, then a ``finish_reason`` chunk, a usage
chunk (unless ``--no-usage`` or not asked for) and ``[DONE]``. Chunks already due are written in one
batch (with zero delays: the whole body in one write). ``--fail-every N`` answers every N-th request
with HTTP 500; ``--max-active N`` lets only N requests generate at once (the rest wait, and their
clock starts when they get a turn), so throughput stops growing past concurrency N. ``--jitter S``
gives each request's TTFT and ITL their own lognormal factor (median 1, sigma S; ``--seed`` fixes it):
a known per-request delay distribution for the regression judgement's tests.

Run: ``python tests/harness/stub_server.py --ttft-ms 50 --itl-ms 10``; it prints ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class StubConfig:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    fail_every: int = 0
    usage: bool = True
    max_active: int = 0  # > 0: at most this many requests generate at once (a saturated server)
    jitter: float = 0.0  # > 0: each request's TTFT and ITL times independent lognormal factors (this sigma)
    seed: int | None = None
    # a slow spell: the first this many completion requests get extra TTFT (counted, not timed, so the
    # spell covers the same requests however slow the machine running the test is)
    slow_spell_requests: int = 0
    slow_spell_ttft_s: float = 0.0


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding frame."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: dict[str, Any]) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def _response(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )


_SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
_MODELS = b'{"object":"list","data":[{"id":"stub","object":"model"}]}'
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not export the name


class _Stream:
    """One response: a list of frames, each written by a timer at its absolute due time.

    ``content`` is the range of frames that are content chunks; their actual write times are kept
    so the stub can report the delays it really produced (``GET /stats``).
    """

    def __init__(
        self, conn: _Connection, frames: list[bytes], due: list[float], content: range, t0: float
    ) -> None:
        self.conn, self.frames, self.due, self.next = conn, frames, due, 0
        self.content, self.t0 = content, t0
        self.written: list[float] = []

    def step(self) -> None:
        conn = self.conn
        if conn.closed:
            conn.finished()
            return
        loop = conn.server.loop
        now = loop.time()
        start = self.next
        while self.next < len(self.frames) and self.due[self.next] <= now:
            self.next += 1
        if self.next > start:
            conn.write(b"".join(self.frames[start : self.next]))
            written = range(max(start, self.content.start), min(self.next, self.content.stop))
            self.written += [now] * len(written)
        if self.next < len(self.frames):
            loop.call_at(self.due[self.next], self.step)
        else:
            if self.written:
                gaps = [b - a for a, b in zip(self.written, self.written[1:])]
                conn.server.record(self.written[0] - self.t0, gaps, (self.t0, now))
            conn.finished()


class _Connection:
    """One client connection read with ``recvmsg``: a request's clock starts at the kernel's receive
    time of its last bytes (``SO_TIMESTAMPNS``), so the stub's own scheduling delays do not shift it."""

    def __init__(self, server: StubServer, sock: socket.socket) -> None:
        self.server, self.sock, self.fd = server, sock, sock.fileno()
        self.buf = b""
        self.out = bytearray()
        self.pending: deque[tuple[float, str, bytes]] = deque()
        self.busy = self.closed = False
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        server.loop.add_reader(self.fd, self.readable)

    def readable(self) -> None:
        arrived = time.monotonic()
        try:
            data, ancillary, _, _ = self.sock.recvmsg(1 << 18, socket.CMSG_SPACE(16))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data, ancillary = b"", []
        if not data:
            self.close()
            return
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                sec, nsec = struct.unpack_from("qq", raw)
                arrived = min(arrived, sec + nsec / 1e9 - (time.time() - time.monotonic()))
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower() + b"\r\n"
            at = head.find(b"\r\ncontent-length:")
            length = int(head[at + 17 : head.index(b"\r\n", at + 17)]) if at >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            path = head[: head.index(b"\r\n")].split(b" ")[1].decode("latin-1")
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            self.pending.append((arrived, path, body))
            if not self.busy:
                self.next_request()

    def write(self, data: bytes) -> None:
        if not self.out:
            try:
                data = data[self.sock.send(data) :]
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                self.close()
                return
            if data:
                self.server.loop.add_writer(self.fd, self.writable)
        self.out += data

    def writable(self) -> None:
        try:
            del self.out[: self.sock.send(self.out)]
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close()
            return
        if not self.out:
            self.server.loop.remove_writer(self.fd)

    def next_request(self) -> None:
        while self.pending and not self.busy and not self.closed:
            arrived, path, body = self.pending.popleft()
            self.busy = True
            self.server.handle(self, arrived, path, body)

    def finished(self) -> None:
        self.busy = False
        self.server.release()
        self.next_request()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.pending.clear()
            self.server.loop.remove_reader(self.fd)
            self.server.loop.remove_writer(self.fd)
            self.sock.close()


class StubServer:
    def __init__(self, config: StubConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config, self.loop = config, loop
        self.count = 0
        self.active = 0
        self.waiting: deque[tuple[_Connection, bytes, bool]] = deque()
        self.frames: dict[tuple[bool, str, int, int, bool, bool], list[bytes]] = {}
        self.achieved: list[tuple[float, list[float]]] = []  # (TTFT, ITL gaps) in seconds, as written
        # each streamed request's (arrival, last write), CLOCK_MONOTONIC seconds: one clock for every process on
        # the machine, so a test can tell whether two stubs were answering at the same moment
        self.spans: list[tuple[float, float]] = []
        self.rng = random.Random(config.seed)
        self.completions_started = 0  # completion requests so far (the slow spell counts them)

    def record(self, ttft: float, gaps: list[float], span: tuple[float, float]) -> None:
        self.achieved.append((ttft, gaps))
        self.spans.append(span)

    def stats(self) -> bytes:
        """The delays really produced since the last call (and forget them): what a client should measure."""
        done, self.achieved = self.achieved, []
        spans, self.spans = self.spans, []
        return json.dumps({"requests": len(done), "ttft_ms": [t * 1e3 for t, _ in done],
                           "itl_ms": [g * 1e3 for _, gaps in done for g in gaps],
                           "spans": [list(span) for span in spans]}).encode()

    def handle(self, conn: _Connection, arrived: float, path: str, body: bytes) -> None:
        if path in ("/health", "/v1/models"):  # readiness probes (guidellm calls /health)
            return self.reply(conn, _response("200 OK", _MODELS if path == "/v1/models" else b"{}"))
        if path == "/stats":
            return self.reply(conn, _response("200 OK", self.stats()))
        self.count += 1
        if self.config.fail_every and self.count % self.config.fail_every == 0:
            return self.reply(conn, _response("500 Internal Server Error", b'{"error":"injected failure"}'))
        if path not in ("/v1/completions", "/v1/chat/completions"):
            return self.reply(conn, _response("404 Not Found", b'{"error":"no such route"}'))
        chat = path.endswith("/chat/completions")
        if self.config.max_active and self.active >= self.config.max_active:
            self.waiting.append((conn, body, chat))  # its clock starts when it gets a turn
            return
        self.active += 1
        self.complete(conn, json.loads(body), chat, arrived)

    def reply(self, conn: _Connection, data: bytes) -> None:
        conn.write(data)
        conn.busy = False
        conn.next_request()

    def release(self) -> None:
        self.active -= 1
        while self.waiting and self.active < (self.config.max_active or 1 << 30):
            conn, body, chat = self.waiting.popleft()
            if conn.closed:
                continue
            self.active += 1
            self.complete(conn, json.loads(body), chat, self.loop.time())

    def complete(self, conn: _Connection, req: dict[str, Any], chat: bool, t0: float) -> None:
        cfg = self.config
        n_out = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        prompt = req["messages"][-1]["content"] if chat else req.get("prompt", "")
        if isinstance(prompt, list):  # chat content parts: [{"type": "text", "text": ...}]
            prompt = " ".join(part.get("text", "") for part in prompt if isinstance(part, dict))
        n_in = len(prompt.split())
        stream = bool(req.get("stream"))
        usage = cfg.usage and (not stream or bool((req.get("stream_options") or {}).get("include_usage")))
        key = (chat, str(req.get("model", "stub")), n_in, n_out, stream, usage)
        frames = self.frames.get(key)
        if frames is None:  # built once per request shape: the stub's per-request work stays small
            frames = self.frames[key] = _frames(*key)
        ttft_s, itl_s = cfg.ttft_s, cfg.itl_s
        self.completions_started += 1
        if self.completions_started <= cfg.slow_spell_requests:
            ttft_s += cfg.slow_spell_ttft_s
        if cfg.jitter:  # a known per-request distribution: median the configured delay, lognormal spread
            ttft_s *= self.rng.lognormvariate(0.0, cfg.jitter)
            itl_s *= self.rng.lognormvariate(0.0, cfg.jitter)
        last_due = t0 + ttft_s + itl_s * (n_out - 1)
        if not stream:
            _Stream(conn, frames, [last_due], range(0), t0).step()
            return
        lead = 2 if chat else 1  # the head (and the role-only chunk) go out at once
        due = [t0] * lead + [t0 + ttft_s + itl_s * i for i in range(n_out)] + [last_due]
        _Stream(conn, frames, due, range(lead, lead + n_out), t0).step()


def _frames(chat: bool, model: str, n_in: int, n_out: int, stream: bool, usage: bool) -> list[bytes]:
    """The bytes of one response, one list entry per timed write."""
    counts = {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}
    if not stream:
        text = " tok" * n_out
        answer = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                  if chat else {"index": 0, "text": text, "finish_reason": "length"})
        body = {"id": "stub", "object": "chat.completion" if chat else "text_completion", "model": model,
                "choices": [answer], **({"usage": counts} if usage else {})}
        return [_response("200 OK", json.dumps(body).encode())]
    base = {"id": "stub", "object": "chat.completion.chunk" if chat else "text_completion", "created": 0,
            "model": model}

    def choice(content: str, finish: str | None) -> dict[str, Any]:
        if chat:
            return {**base, "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}
        return {**base, "choices": [{"index": 0, "text": content, "finish_reason": finish}]}

    frames = [_SSE_HEAD]
    if chat:
        frames.append(_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                   "finish_reason": None}]}))
    frames += [_event(choice(" tok", None))] * n_out
    tail = _event(choice("", "length"))
    if usage:
        tail += _event({**base, "choices": [], "usage": counts})
    frames.append(tail + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return frames


async def serve(config: StubConfig, port: int) -> None:
    loop = asyncio.get_running_loop()
    stub = StubServer(config, loop)
    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    listener.setblocking(False)
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    while True:
        sock, _ = await loop.sock_accept(listener)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _Connection(stub, sock)


CLIENT_NICE = -10  # the stub's niceness, and the measuring clients' in the tests (tests/bench/priority.py)


def raise_priority(pid: int = 0) -> int | None:
    """``pid`` (0: this thread) ahead of ordinary processes, at :data:`CLIENT_NICE`, where allowed (root or
    CAP_SYS_NICE): on a shared machine a reference server, or a client, that wakes late injects or stamps the wrong
    delays. Returns its previous niceness, or None where not allowed (it then runs as it is)."""
    try:
        before = os.getpriority(os.PRIO_PROCESS, pid)
        os.setpriority(os.PRIO_PROCESS, pid, CLIENT_NICE)
    except OSError:
        return None
    return before


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--fail-every", type=int, default=0)
    parser.add_argument("--no-usage", action="store_true")
    parser.add_argument("--max-active", type=int, default=0)
    parser.add_argument("--jitter", type=float, default=0.0,
                        help="lognormal sigma of each request's TTFT and ITL factor (0: fixed delays)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--slow-spell-requests", type=int, default=0,
                        help="the first this many completion requests are slower")
    parser.add_argument("--slow-spell-ttft-ms", type=float, default=0.0, help="their extra TTFT")
    args = parser.parse_args(argv)
    config = StubConfig(args.ttft_ms / 1e3, args.itl_ms / 1e3, args.fail_every, not args.no_usage, args.max_active,
                        args.jitter, args.seed, args.slow_spell_requests, args.slow_spell_ttft_ms / 1e3)
    raise_priority()
    try:
        asyncio.run(serve(config, args.port))
    except KeyboardInterrupt:
        pass


@contextmanager
def running_stub(*args: str) -> Iterator[str]:
    """Start the stub in a child process with CLI ``args``; yield its base URL; stop it."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), *args], stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"stub server did not start (exit code {proc.poll()}, said {line!r})")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
