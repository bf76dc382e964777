"""A small HTTP/1.1 client for the load generator: one asyncio protocol per kept-alive connection.

Why not httpx: a benchmark client has to take its timestamps where the bytes are, and spend little
CPU between them. Here a request's clock starts just before its bytes are handed to the socket (one
``send``, no await in between), and every read carries the kernel's receive time (plain TCP) or the
time of ``data_received`` (TLS), taken before anything is parsed; decoding (chunked framing, SSE
lines) happens later in the request's own task. With 64 streams starting at once, httpx's send path
(several awaits and pool locks per request) put ~30 ms of client scheduling into the measured TTFT.
Against aiohttp (bench/http_client_accuracy.py, same load generator, same stub): TTFT off by 0.6 ms at 1
stream and 3.1 ms at 64 with aiohttp, under 0.06 ms with this client, at the same CPU per token.

Supported: ``http``/``https``, keep-alive with an idle pool, ``content-length``, chunked and
read-until-close bodies, gzip/deflate bodies. Not supported (not needed by a load generator):
proxies, redirects, pipelining, HTTP/2.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import struct
import time
import zlib
from collections import deque
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from raylift.errors import BenchmarkError

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024
_PAUSE_AT = 4 * 1024 * 1024  # buffered bytes not yet consumed by the request's task
_READ_SIZE = 256 * 1024
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux; Python does not export the name
_MAX_KERNEL_LAG_NS = 10_000_000_000


class HttpError(BenchmarkError):
    """A transport or protocol failure; the message names what happened."""


class HttpTimeout(HttpError):
    """No response (or no next bytes) within the request's time bound."""


class ProtocolViolation(HttpError):
    """The server sent something that is not HTTP/1.1."""


class _Connection:
    """Reads of one connection, queued with their arrival time and parsed later by the request's task."""

    def __init__(self) -> None:
        self.pieces: deque[tuple[int, bytes]] = deque()
        self.buffered = 0
        self.closed = False
        self.error: BaseException | None = None
        self.idle_since = time.monotonic()
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False

    def _received(self, ns: int, data: bytes) -> None:
        self.pieces.append((ns, data))
        self.buffered += len(data)
        if self.buffered > _PAUSE_AT and not self._paused:
            self._pause(True)
            self._paused = True
        self._wake()

    def _lost(self, exc: BaseException | None) -> None:
        self.closed = True
        self.error = self.error or exc
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _pause(self, pause: bool) -> None:
        raise NotImplementedError

    def send(self, data: bytes) -> int:
        """Write ``data`` at once; the ``perf_counter_ns`` just before it reached the socket."""
        raise NotImplementedError

    def close(self, exc: BaseException | None = None) -> None:
        raise NotImplementedError

    async def next_piece(self) -> tuple[int, bytes] | None:
        """The next (arrival ns, bytes) read, or None once the peer has closed and all was read."""
        while not self.pieces:
            if self.closed:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        piece = self.pieces.popleft()
        self.buffered -= len(piece[1])
        if self._paused and self.buffered < _PAUSE_AT // 2:
            self._pause(False)
            self._paused = False
        return piece

    def usable(self) -> bool:
        return not self.closed and not self.pieces


class _TcpConnection(_Connection):
    """Plain TCP read with ``recvmsg``: each read carries the kernel's receive time (``SO_TIMESTAMPNS``).

    That is when the bytes reached this machine, whatever this process was doing then; a client
    descheduled for a few milliseconds on a busy host still timestamps the token when it arrived.
    Where the kernel gives no timestamp, the time the read was made is used.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        super().__init__()
        self.loop, self.sock, self.fd = loop, sock, sock.fileno()
        self._out = bytearray()
        try:
            sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            self._ancillary = socket.CMSG_SPACE(16)
        except (OSError, TypeError):
            self._ancillary = 0
        loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        now = time.perf_counter_ns()
        try:
            if self._ancillary:
                data, ancillary, _, _ = self.sock.recvmsg(_READ_SIZE, self._ancillary)
            else:
                data, ancillary = self.sock.recv(_READ_SIZE), []
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.close(exc)
            return
        if not data:
            self.close()
            return
        for level, kind, raw in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = struct.unpack_from("qq", raw)
                kernel = sec * 1_000_000_000 + nsec - (time.time_ns() - time.perf_counter_ns())
                if now - _MAX_KERNEL_LAG_NS < kernel <= now:  # a wall-clock step would put it elsewhere
                    now = kernel
        self._received(now, data)

    def usable(self) -> bool:
        """Still open, as far as the kernel knows: a peer's FIN may not have been read by the loop yet."""
        if not super().usable():
            return False
        try:
            alive = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
        except (BlockingIOError, InterruptedError):
            return True  # nothing to read: open and idle
        except OSError:
            alive = False
        if not alive:
            self.close()
        return alive

    def _pause(self, pause: bool) -> None:
        if pause:
            self.loop.remove_reader(self.fd)
        elif not self.closed:
            self.loop.add_reader(self.fd, self._readable)

    def send(self, data: bytes) -> int:
        now = time.perf_counter_ns()
        if self._out:
            self._out += data
            return now
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.close(exc)
            raise HttpError(f"send failed: {exc}") from None
        if sent < len(data):
            self._out += data[sent:]
            self.loop.add_writer(self.fd, self._writable)
        return now

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self.close(exc)
            return
        del self._out[:sent]
        if not self._out:
            self.loop.remove_writer(self.fd)

    def close(self, exc: BaseException | None = None) -> None:
        if self.sock.fileno() >= 0:
            self.loop.remove_reader(self.fd)
            self.loop.remove_writer(self.fd)
            self.sock.close()
        self._lost(exc)


class _TlsConnection(_Connection, asyncio.Protocol):
    """TLS through asyncio's transport; reads are timestamped in ``data_received``, before parsing."""

    def __init__(self) -> None:
        super().__init__()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._received(time.perf_counter_ns(), data)

    def eof_received(self) -> bool:
        self._lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def _pause(self, pause: bool) -> None:
        if self.transport is not None:
            (self.transport.pause_reading if pause else self.transport.resume_reading)()

    def send(self, data: bytes) -> int:
        assert self.transport is not None
        now = time.perf_counter_ns()
        self.transport.write(data)
        return now

    def close(self, exc: BaseException | None = None) -> None:
        if self.transport is not None:
            self.transport.close()
        self._lost(exc)


class _ChunkedDecoder:
    """Incremental ``transfer-encoding: chunked`` decoder; ``done`` after the last chunk and trailers."""

    def __init__(self) -> None:
        self._buf = b""
        self._remaining = 0
        self._crlf = False
        self._trailers = False
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        pos, end = 0, len(buf)
        while pos < end and not self.done:
            if self._remaining:
                take = min(self._remaining, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._remaining -= take
                self._crlf = self._remaining == 0
            elif self._crlf:
                if end - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise ProtocolViolation("chunked body: chunk data not followed by CRLF")
                pos += 2
                self._crlf = False
            else:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if end - pos > 4096:
                        raise ProtocolViolation("chunked body: chunk-size line longer than 4 KiB")
                    break
                if self._trailers:
                    self.done = eol == pos
                else:
                    try:
                        size = int(buf[pos:eol].split(b";", 1)[0], 16)
                    except ValueError:
                        bad = buf[pos:eol][:40]
                        raise ProtocolViolation(f"chunked body: bad chunk size {bad!r}") from None
                    self._remaining = size
                    self._trailers = size == 0
                pos = eol + 2
        self._buf = buf[pos:]
        return b"".join(out) if len(out) != 1 else out[0]


@dataclass
class Response:
    """Status and headers of a response whose body is read with :meth:`Http1Client.body`."""

    status: int
    headers: dict[str, str]
    head_ns: int
    _conn: _Connection
    _rest: bytes
    _rest_ns: int
    _done: bool = False


class Http1Client:
    """Requests to one origin over a pool of kept-alive connections (at most one request each)."""

    def __init__(
        self,
        root: str,
        *,
        headers: Mapping[str, str] | None = None,
        connect_timeout_s: float = 30.0,
        max_idle_s: float = 2.0,
    ) -> None:
        parts = urlsplit(root)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise HttpError(f"not an http(s) URL: {root!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        host_header = self.host if ":" not in self.host else f"[{self.host}]"
        host_header = host_header if default_port else f"{host_header}:{self.port}"
        base = {"host": host_header, "user-agent": "raylift-bench", "accept-encoding": "identity",
                **{k.lower(): v for k, v in (headers or {}).items()}}
        self._head_fields = "".join(f"{k}: {v}\r\n" for k, v in base.items())
        self.connect_timeout_s = connect_timeout_s
        # Servers drop idle keep-alive connections (uvicorn after 5 s); reusing one they are closing
        # would fail the request, so older idle connections are closed instead of reused.
        self.max_idle_s = max_idle_s
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()

    async def _connect(self) -> _Connection:
        try:
            return await asyncio.wait_for(self._open_connection(), self.connect_timeout_s)
        except TimeoutError:
            raise HttpTimeout(
                f"connect to {self.host}:{self.port} timed out after {self.connect_timeout_s}s"
            ) from None
        except OSError as exc:
            raise HttpError(f"connect to {self.host}:{self.port} failed: {exc}") from None

    async def _open_connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn: _Connection
        if self._ssl is not None:
            _, conn = await loop.create_connection(_TlsConnection, self.host, self.port, ssl=self._ssl,
                                                   server_hostname=self.host)
        else:
            error: OSError = OSError(f"no address for {self.host}")
            for family, kind, proto, _, address in await loop.getaddrinfo(
                self.host, self.port, type=socket.SOCK_STREAM
            ):
                sock = socket.socket(family, kind, proto)
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    await loop.sock_connect(sock, address)
                except OSError as exc:
                    sock.close()
                    error = exc
                    continue
                except BaseException:
                    sock.close()
                    raise
                conn = _TcpConnection(loop, sock)
                break
            else:
                raise error
        self._open.add(conn)
        return conn

    def _take_idle(self) -> _Connection | None:
        """An idle connection that is still good, without awaiting (so the caller keeps its turn)."""
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if conn.usable() and now - conn.idle_since <= self.max_idle_s:
                return conn
            self._discard(conn)
        return None

    def _discard(self, conn: _Connection) -> None:
        conn.close()
        self._open.discard(conn)

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if reusable and conn.usable():
            conn.idle_since = time.monotonic()
            self._idle.append(conn)
        else:
            self._discard(conn)

    async def prefill(self, count: int) -> None:
        """Open connections until ``count`` are idle (done before a timed run, not inside it)."""
        now = time.monotonic()
        fresh = [c for c in self._idle if c.usable() and now - c.idle_since <= self.max_idle_s]
        for conn in self._idle:
            if conn not in fresh:
                self._discard(conn)
        self._idle = fresh
        missing = count - len(self._idle)
        if missing > 0:
            self._idle.extend(await asyncio.gather(*(self._connect() for _ in range(missing))))

    def encode(
        self, method: str, path: str, body: bytes = b"", content_type: str = "application/json"
    ) -> bytes:
        """The bytes of one request (head and body), ready for :meth:`request`."""
        head = f"{method} {path} HTTP/1.1\r\n{self._head_fields}"
        if body or method in ("POST", "PUT", "PATCH"):
            head += f"content-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
        return (head + "\r\n").encode("latin-1") + body

    async def request(self, raw: bytes) -> tuple[int, Response]:
        """Send an encoded request; returns (ns its bytes reached the socket, response head).

        The body must then be read to the end with :meth:`body` (or the response closed with
        :meth:`close`), which returns the connection to the pool.
        """
        conn = self._take_idle() or await self._connect()
        try:
            sent_ns = conn.send(raw)
            return sent_ns, await self._read_head(conn)
        except BaseException:
            self._discard(conn)
            raise

    async def _read_head(self, conn: _Connection) -> Response:
        buf = b""
        while True:
            piece = await conn.next_piece()
            if piece is None:
                detail = f": {conn.error}" if conn.error else ""
                raise HttpError(f"server closed the connection before a response{detail}")
            ns, data = piece
            buf += data
            end = buf.find(_HEAD_END)
            if end >= 0:
                break
            if len(buf) > _MAX_HEAD:
                raise ProtocolViolation("response head larger than 64 KiB")
        lines = buf[:end].decode("latin-1").split("\r\n")
        try:
            version, status, *_ = lines[0].split(" ", 2)
            code = int(status)
        except ValueError:
            raise ProtocolViolation(f"bad status line {lines[0][:80]!r}") from None
        if not version.startswith("HTTP/1."):
            raise ProtocolViolation(f"bad status line {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            key, sep, value = line.partition(":")
            if sep:
                key = key.strip().lower()
                headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        if version == "HTTP/1.0" and "keep-alive" not in headers.get("connection", "").lower():
            headers["connection"] = "close"
        return Response(code, headers, ns, conn, buf[end + 4 :], ns)

    async def body(self, response: Response) -> AsyncGenerator[tuple[int, bytes], None]:
        """Yield the body as (arrival ns of its read, decoded bytes); then release the connection."""
        conn, headers = response._conn, response.headers
        keep = "close" not in headers.get("connection", "").lower()
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = None if chunked else headers.get("content-length")
        remaining = int(length) if length is not None else -1
        if length is None and not chunked:
            keep = False  # the body ends when the server closes
        decoder = _ChunkedDecoder() if chunked else None
        encoding = headers.get("content-encoding", "identity").lower()
        inflate = zlib.decompressobj(47) if encoding in ("gzip", "deflate", "x-gzip") else None
        if inflate is None and encoding != "identity":
            self._discard(conn)
            raise ProtocolViolation(f"unsupported content-encoding {encoding!r}")
        finished = False
        try:
            ns, data = response._rest_ns, response._rest
            while True:
                if data:
                    if decoder is not None:
                        data = decoder.feed(data)
                        finished = decoder.done
                    elif remaining >= 0:
                        if len(data) > remaining:
                            keep = False  # bytes past the body: not a clean connection
                            data = data[:remaining]
                        remaining -= len(data)
                        finished = remaining == 0
                    if inflate is not None and data:
                        data = inflate.decompress(data)
                    if data:
                        yield ns, data
                elif remaining == 0:
                    finished = True
                if finished:
                    break
                piece = await conn.next_piece()
                if piece is None:
                    if decoder is None and remaining < 0:
                        finished = True  # read-until-close body
                        break
                    raise HttpError("server closed the connection in the middle of the response body")
                ns, data = piece
        finally:
            response._done = True
            self._release(conn, keep and finished)

    async def read(self, response: Response) -> bytes:
        """The whole body."""
        return b"".join([data async for _, data in self.body(response)])

    def close(self, response: Response) -> None:
        """Drop a response without reading its body (its connection is closed, not reused)."""
        if not response._done:
            response._done = True
            self._discard(response._conn)

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()
