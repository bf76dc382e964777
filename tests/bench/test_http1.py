"""The load generator's HTTP/1.1 client: framing, keep-alive, failures, and where timestamps come from."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable

import pytest

from raylift.measure.http1 import Http1Client, ProtocolViolation, _ChunkedDecoder
from raylift.measure.loadgen import LoadGenerator
from raylift.measure.profiles import RequestProfile, generate_requests

Stub = Callable[..., str]

CHUNKED = b"5\r\nhello\r\n1;ext=1\r\n \r\n6\r\nworld!\r\n0\r\ntrailer: x\r\n\r\n"


def test_chunked_decoder_handles_every_split() -> None:
    for cut in range(len(CHUNKED) + 1):
        decoder = _ChunkedDecoder()
        out = decoder.feed(CHUNKED[:cut]) + decoder.feed(CHUNKED[cut:])
        assert out == b"hello world!" and decoder.done, cut


def test_chunked_decoder_refuses_garbage() -> None:
    with pytest.raises(ProtocolViolation, match="bad chunk size"):
        _ChunkedDecoder().feed(b"zz\r\nhello\r\n")
    with pytest.raises(ProtocolViolation, match="not followed by CRLF"):
        _ChunkedDecoder().feed(b"2\r\nabXY")


def test_connections_are_kept_alive_and_reused(stub: Stub) -> None:
    url = stub()

    async def go() -> tuple[list[int], int]:
        client = Http1Client(url)
        statuses = []
        for _ in range(5):
            _, response = await client.request(client.encode("GET", "/v1/models"))
            assert b'"stub"' in await client.read(response)
            statuses.append(response.status)
        opened = len(client._open)
        await client.aclose()
        return statuses, opened

    statuses, opened = asyncio.run(go())
    assert statuses == [200] * 5 and opened == 1


def _one_shot_server(
    respond: Callable[[socket.socket], None], connections: int = 1
) -> tuple[int, threading.Thread]:
    """A blocking server thread: on each of ``connections`` connections, reads one request head and
    calls ``respond`` with the socket, then closes it."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            for _ in range(connections):
                conn, _ = listener.accept()
                with conn:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    data = b""
                    while b"\r\n\r\n" not in data:
                        data += conn.recv(65536)
                    respond(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def test_read_timestamps_are_arrival_times_not_processing_times() -> None:
    """A client busy for 300 ms when a chunk arrives still dates the chunk to its arrival."""
    sent_at: list[int] = []

    def respond(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        time.sleep(0.05)
        sent_at.append(time.perf_counter_ns())
        conn.sendall(b"3\r\ntok\r\n0\r\n\r\n")
        sent_at.append(time.perf_counter_ns())  # on loopback the chunk has arrived when sendall returns
        time.sleep(0.5)

    port, thread = _one_shot_server(respond)

    async def go() -> int:
        client = Http1Client(f"http://127.0.0.1:{port}")
        _, response = await client.request(client.encode("GET", "/"))
        time.sleep(0.3)  # noqa: ASYNC251 - the event loop is blocked on purpose, as on a busy client, while the chunk arrives
        pieces = [piece async for piece in client.body(response)]
        await client.aclose()
        assert b"".join(data for _, data in pieces) == b"tok"
        return pieces[-1][0]

    arrived = asyncio.run(go())
    thread.join(5)
    # dated within the send (a busy machine may stall the server's thread between its stamps: once 524 ms after
    # the first), not to when the blocked loop read it (300 ms later)
    assert sent_at[0] <= arrived <= sent_at[1] + 20_000_000, ((arrived - sent_at[0]) / 1e6, (sent_at[1] - sent_at[0]) / 1e6)


def test_server_closing_mid_body_is_an_error_record() -> None:
    def respond(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        conn.sendall(b'15\r\ndata: {"text": "a"}\n\n\r\n')  # one event, then the server goes away

    port, thread = _one_shot_server(respond, connections=2)  # the warm-up GET, then the request

    async def go() -> list:
        async with LoadGenerator(f"http://127.0.0.1:{port}", "m", api="completions") as gen:
            outcome = await gen.run_concurrency(generate_requests(RequestProfile("c", 4, 0, 2, 0), 1), 1,
                                                max_seconds=10)
        return outcome.records

    records = asyncio.run(go())
    thread.join(5)
    assert len(records) == 1
    assert records[0].error == "HttpError: server closed the connection in the middle of the response body"


def test_stream_without_done_is_a_truncated_error_record() -> None:
    """A proxy may end the body cleanly when the replica behind it died mid-stream: still an error."""
    def respond(conn: socket.socket) -> None:
        event = b'data: {"choices": [{"text": "a"}]}\n\n'
        # "connection: close", as this server closes after each response: without it the client may
        # reuse the warm-up's connection before the FIN reaches it (a keep-alive race, 1 in ~100 runs)
        conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
                     b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))

    port, thread = _one_shot_server(respond, connections=2)  # the warm-up GET, then the request

    async def go() -> list:
        async with LoadGenerator(f"http://127.0.0.1:{port}", "m", api="completions") as gen:
            return [await gen.send(generate_requests(RequestProfile("c", 4, 0, 2, 0), 1)[0])]

    records = asyncio.run(go())
    thread.join(5)
    assert records[0].error is not None and records[0].error.startswith("truncated stream")


def test_refused_connection_is_an_error_record() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once closed

    async def go() -> list:
        async with LoadGenerator(f"http://127.0.0.1:{port}", "m") as gen:
            return [await gen.send(spec) for spec in generate_requests(RequestProfile("c", 4, 0, 2, 0), 2)]

    records = asyncio.run(go())
    assert [r.error.split(":")[0] for r in records] == ["HttpError", "HttpError"]
    assert "failed" in records[0].error
