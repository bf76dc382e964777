"""HTTP stand-ins for AWS tests: a programmable proxy in front of the moto server.

The proxy is a real server on 127.0.0.1; a test installs a ``rule`` that may answer a request itself
(503 SlowDown, 403 AccessDenied, ...) before the request would reach moto. Everything else is
forwarded byte for byte, so boto3's retries and errors are exercised over real HTTP.
"""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

Reply = tuple[int, dict[str, str], bytes]
Rule = Callable[[str, str], "Reply | None"]  # (method, X-Amz-Target or path) -> own reply, or None to forward

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade"}


@dataclass
class Proxy:
    url: str
    upstream: str
    rule: Rule | None = None
    seen: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status)
    bodies: list[tuple[str, bytes]] = field(default_factory=list)  # (X-Amz-Target or path, request body)

    def conn_json(self) -> str:
        return json.dumps({"conn_type": "aws", "extra": {"region_name": "us-west-2", "endpoint_url": self.url}})


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(chunks)
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _send(self, status: int, headers: dict[str, str], body: bytes) -> None:
            self.send_response(status)
            head = self.command == "HEAD"  # a HEAD reply keeps upstream's Content-Length and has no body
            for key, value in headers.items():
                if key.lower() not in HOP_BY_HOP and (head or key.lower() != "content-length"):
                    self.send_header(key, value)
            if not head:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def _any(self) -> None:
            body = self._body()
            proxy.bodies.append((self.headers.get("X-Amz-Target") or self.path, body))
            target = self.headers.get("X-Amz-Target")  # JSON-protocol APIs name the operation here
            own = proxy.rule(self.command, target or self.path) if proxy.rule else None
            if own is not None:
                proxy.seen.append((self.command, self.path, own[0]))
                self._send(*own)
                return
            up = urlparse(proxy.upstream)
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            reply = conn.getresponse()
            data = reply.read()
            proxy.seen.append((self.command, self.path, reply.status))
            self._send(reply.status, dict(reply.getheaders()), data)
            conn.close()

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

    return Handler


@contextmanager
def proxy_to(upstream: str) -> Iterator[Proxy]:
    """Run a :class:`Proxy` to ``upstream`` on a free loopback port."""
    proxy = Proxy(url="", upstream=upstream)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()


def s3_error(status: int, code: str, message: str) -> Reply:
    body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    return status, {"Content-Type": "application/xml"}, body.encode()


def json_reply(payload: object, status: int = 200) -> Reply:
    import json

    return status, {"Content-Type": "application/x-amz-json-1.1"}, json.dumps(payload).encode()


def json_error(code: str, message: str, status: int = 400) -> Reply:
    """An error reply of the JSON protocols (CodeBuild, ECS, ...): botocore reads the code from ``__type``."""
    return json_reply({"__type": code, "message": message}, status)


def throttle_first(operation: str, times: int) -> Rule:
    """A rule answering the first ``times`` calls of ``operation`` (``X-Amz-Target`` suffix, e.g.
    ``.BatchGetBuilds``; ``times < 0``: every call) with ``ThrottlingException``, then forwarding to moto."""
    left = [times]

    def rule(method: str, target: str) -> Reply | None:
        if not target.endswith(operation) or left[0] == 0:
            return None
        left[0] -= 1
        return json_error("ThrottlingException", "Rate exceeded")

    return rule
