"""raylift's front HAProxy (raylift.local.front) with the real HAProxy binary, in front of two loopback HTTP servers
standing for the blue and green clusters' Serve ports: the switch sends new requests to green at once, a request in
flight on blue finishes there, and nothing is refused; the front's process is raylift's and stops with it. The
colours' settings never share a port."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from raylift.config import LocalSettings
from raylift.local.blue_green import COLOURS, colour_settings
from raylift.local.front import LocalFront, haproxy_binary
from tests.serve_apps.models import RUNTIME_PYTHON

PORTS = {"blue": 31710, "green": 31740}
FRONT_PORT = 31790


def _server(name: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.startswith("/slow"):
                time.sleep(3)
            body = name.encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture()
def front(tmp_path: Path) -> Iterator[LocalFront]:
    servers = [_server(colour, port) for colour, port in PORTS.items()]
    settings = LocalSettings(home=tmp_path, front_port=FRONT_PORT)
    front = LocalFront(settings, PORTS, haproxy_binary(Path(RUNTIME_PYTHON)))
    try:
        front.ensure("blue")
        yield front
    finally:
        front.stop()
        for server in servers:
            server.shutdown()


def test_the_switch_sends_new_requests_to_green_and_lets_blue_finish_its_own(front: LocalFront) -> None:
    assert {httpx.get(front.url, timeout=10).text for _ in range(6)} == {"blue"}
    slow: dict[str, str] = {}
    in_flight = threading.Thread(target=lambda: slow.update(answer=httpx.get(f"{front.url}/slow", timeout=20).text))
    in_flight.start()
    time.sleep(0.5)
    assert front.server_states()["blue"]["scur"] == "1"
    front.switch("green")
    assert {httpx.get(front.url, timeout=10).text for _ in range(6)} == {"green"}
    assert front.wait_drained("blue", timeout_s=10) == 0
    in_flight.join()
    assert slow["answer"] == "blue"  # the request in flight finished where it started
    states = front.server_states()
    assert states["blue"]["status"] == "DRAIN" and states["green"]["status"] != "MAINT", states


def test_stop_leaves_no_process_and_a_restart_serves_the_colour_it_is_given(front: LocalFront) -> None:
    record = front._record()
    assert record is not None and record.running()
    front.stop()
    assert not record.running() and not front.running() and not front.socket_path.exists()
    with pytest.raises(httpx.ConnectError):
        httpx.get(front.url, timeout=5)
    front.ensure("green")  # LocalTarget.scale gives the active colour (raylift.local.blue_green's record)
    assert httpx.get(front.url, timeout=10).text == "green"


def test_an_unknown_colour_is_refused(front: LocalFront) -> None:
    from raylift.errors import ClusterError

    with pytest.raises(ClusterError, match="no cluster 'purple'"):
        front.switch("purple")
    assert httpx.get(front.url, timeout=10).text == "blue"


def test_the_two_colours_share_no_port(tmp_path: Path) -> None:
    base = LocalSettings(home=tmp_path, serve_port=22010, dashboard_port=22265, gcs_port=22379,
                         client_server_port=22001, agent_port_base=22500)
    ports = {}
    for colour in COLOURS:
        s = colour_settings(base, colour, Path(RUNTIME_PYTHON))
        first, last = s.direct_ingress_http_ports
        ports[colour] = {s.serve_port, s.dashboard_port, s.gcs_port, s.client_server_port, s.haproxy_stats_port,
                         s.haproxy_metrics_port, *s.fallback_proxy_ports, *range(first, last + 1),
                         *range(s.agent_port_base, s.agent_port_base + 4)}
        assert s.cluster_dir == tmp_path / ("cluster" if colour == "blue" else "cluster-green")
    assert not ports["blue"] & ports["green"]
    assert dataclasses.replace(base).model_store == colour_settings(base, "green", Path("x")).model_store
