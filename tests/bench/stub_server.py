"""A stand-in OpenAI-compatible server on 127.0.0.1 with injected, known delays.

Raw asyncio HTTP/1.1 (keep-alive, chunked SSE), run as its own process so its timing is not
disturbed by the client under test. Each streamed response sends a role-only chunk at once, then
``max_tokens`` content chunks, the first at ``ttft`` after the request body arrived and each next one
``itl`` later (scheduled on absolute times, so sleep overshoot does not accumulate), then a
``finish_reason`` chunk, a usage chunk (unless ``--no-usage`` or not asked for) and ``[DONE]``.
``--fail-every N`` answers every N-th request with HTTP 500; ``--max-active N`` lets only N requests
generate at once (the rest wait), so throughput stops growing past concurrency N.

Run: ``python tests/bench/stub_server.py --ttft-ms 50 --itl-ms 10``; it prints ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass
class StubConfig:
    ttft_s: float = 0.0
    itl_s: float = 0.0
    fail_every: int = 0
    usage: bool = True
    max_active: int = 0  # > 0: at most this many requests generate at once (a saturated server)


def _chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunked-encoding frame."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(obj: dict) -> bytes:
    return _chunk(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")


def _response(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )


class StubServer:
    def __init__(self, config: StubConfig) -> None:
        self.config = config
        self.count = 0
        self.active = asyncio.Semaphore(config.max_active) if config.max_active else None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                _method, path, _version = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                t0 = loop.time()
                if path in ("/health", "/v1/models"):  # readiness probes (guidellm calls /health)
                    models = b'{"object":"list","data":[{"id":"stub","object":"model"}]}'
                    writer.write(_response("200 OK", models if path == "/v1/models" else b"{}"))
                    await writer.drain()
                    continue
                self.count += 1
                if self.config.fail_every and self.count % self.config.fail_every == 0:
                    writer.write(_response("500 Internal Server Error", b'{"error":"injected failure"}'))
                    await writer.drain()
                    continue
                if path not in ("/v1/completions", "/v1/chat/completions"):
                    writer.write(_response("404 Not Found", b'{"error":"no such route"}'))
                    await writer.drain()
                    continue
                if self.active is None:
                    await self.complete(json.loads(body), path.endswith("/chat/completions"), t0, writer)
                else:
                    async with self.active:
                        t0 = loop.time()
                        await self.complete(json.loads(body), path.endswith("/chat/completions"), t0, writer)
        except ConnectionError:
            return
        finally:
            writer.close()

    async def complete(self, req: dict, chat: bool, t0: float, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        cfg = self.config
        n_out = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        prompt = req["messages"][-1]["content"] if chat else req.get("prompt", "")
        if isinstance(prompt, list):  # chat content parts: [{"type": "text", "text": ...}]
            prompt = " ".join(part.get("text", "") for part in prompt if isinstance(part, dict))
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": n_out,
                 "total_tokens": len(prompt.split()) + n_out}
        model = req.get("model", "stub")
        if not req.get("stream"):
            delay = t0 + cfg.ttft_s + cfg.itl_s * (n_out - 1) - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            text = " tok" * n_out
            choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                      if chat else {"index": 0, "text": text, "finish_reason": "length"})
            body = {"id": "stub", "object": "chat.completion" if chat else "text_completion", "model": model,
                    "choices": [choice]}
            if cfg.usage:
                body["usage"] = usage
            writer.write(_response("200 OK", json.dumps(body).encode()))
            await writer.drain()
            return
        obj = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": "stub", "object": obj, "created": 0, "model": model}

        def choice(content: str, finish: str | None) -> dict:
            if chat:
                return {**base, "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}
            return {**base, "choices": [{"index": 0, "text": content, "finish_reason": finish}]}

        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        if chat:
            writer.write(_event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                      "finish_reason": None}]}))
        token = _event(choice(" tok", None))
        for i in range(n_out):
            delay = t0 + cfg.ttft_s + cfg.itl_s * i - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                writer.write(token)
                await writer.drain()
            else:
                writer.write(token)
                if i % 16 == 15:
                    await writer.drain()
        writer.write(_event(choice("", "length")))
        if cfg.usage and (req.get("stream_options") or {}).get("include_usage"):
            writer.write(_event({**base, "choices": [], "usage": usage}))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()


async def serve(config: StubConfig, port: int) -> None:
    server = await asyncio.start_server(StubServer(config).handle, "127.0.0.1", port, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=0.0)
    parser.add_argument("--itl-ms", type=float, default=0.0)
    parser.add_argument("--fail-every", type=int, default=0)
    parser.add_argument("--no-usage", action="store_true")
    parser.add_argument("--max-active", type=int, default=0)
    args = parser.parse_args(argv)
    config = StubConfig(args.ttft_ms / 1e3, args.itl_ms / 1e3, args.fail_every, not args.no_usage, args.max_active)
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
