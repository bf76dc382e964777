"""The ``ray`` target (a Ray cluster raylift did not start) without Ray: its options, and that it never scales or
stops the cluster, against the dashboard stand-in. The deploy onto a real Ray head is in
tests/integration/test_ray_cluster_target.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from raylift.errors import ClusterError, RayliftValueError
from raylift.targets import get_target
from raylift.targets.ray_cluster import RayClusterTarget
from tests.fixtures.serve_standin import serve_standin


def target(url: str, serve_url: str = "http://127.0.0.1:8000") -> RayClusterTarget:
    made = get_target("ray", dashboard_url=url, serve_url=serve_url)
    assert isinstance(made, RayClusterTarget)
    return made


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"serve_url": "http://h:8000"}, "needs target_options.dashboard_url, an http.s. URL with a host"),
        ({"dashboard_url": "http://h:8265"}, "needs target_options.serve_url"),
        ({"dashboard_url": "h:8265", "serve_url": "http://h:8000"}, "dashboard_url.*got 'h:8265'"),
        ({"dashboard_url": "http://h:8265", "serve_url": "http://h:8000", "address": "h"},
         r"\['address'\] are not options of the ray target: use dashboard_url, serve_url"),
    ],
)
def test_options_are_checked_by_name(options: dict[str, str], message: str) -> None:
    with pytest.raises(RayliftValueError, match=message):
        get_target("ray", **options)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:1#",                       # the finding: '#' turns every '/api/...' raylift appends into a fragment
    "http://evil.example:80/anything#",
    "http://h:8265/?x=",                         # a query swallows the path the same way
    "http://user:pw@h:8265",                     # userinfo: credentials in a URL from Params
    "http://h:8265/some/path",                   # a path: raylift would GET below it on any host
    "http://h:99999",                            # not a port
])
@pytest.mark.parametrize("option", ["dashboard_url", "serve_url"])
def test_a_url_from_params_is_only_scheme_host_and_port(url: str, option: str) -> None:
    """Issue 57: a Params-only dashboard URL with '#' made the scale step GET any path on any host."""
    options = {"dashboard_url": "http://h:8265", "serve_url": "http://h:8000", option: url}
    with pytest.raises(RayliftValueError, match=rf"target_options.{option}.*scheme://host:port"):
        get_target("ray", **options)


def test_a_trailing_slash_is_still_fine() -> None:
    assert target("http://h:8265/", "https://h/").serve_url == "https://h"


def test_serve_listens_where_serve_url_says() -> None:
    assert target("http://127.0.0.1:1", "http://127.0.0.1:34800").serve_cluster_options() == {
        "http_options": {"host": "127.0.0.1", "port": 34800}}
    # Compose: the Airflow containers reach the head by its service name, so Serve listens on every interface
    assert target("http://ray-head:8265", "http://ray-head:8000/").serve_cluster_options() == {
        "http_options": {"host": "0.0.0.0", "port": 8000}}
    assert target("http://ray-head:8265", "http://ray-head:8000/").endpoint_url() == "http://ray-head:8000"


def test_scale_and_teardown_leave_the_cluster_as_it_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    apps = {"applications": [{"name": "theirs", "import_path": "a:b", "route_prefix": "/x"}]}
    with serve_standin(monkeypatch, tmp_path, apps) as standin:
        t = target(standin.url)
        with caplog.at_level(logging.WARNING, logger="raylift.targets.ray_cluster"):
            want = t.scale(workers=3)
        assert want.nodes == 1  # the stand-in's one node, as it is
        assert "does not scale a cluster it did not start" in caplog.text and "workers Param (3) is not applied" in caplog.text
        assert t.check_ready(want).nodes == 1
        t.teardown()
        assert standin.puts == [] and standin.app("theirs") is not None
        assert t.current_serve_config()["applications"] == apps["applications"]
        assert t.billed_nodes() == {}  # no price for a cluster raylift cannot see the machines of


def test_a_cluster_that_does_not_answer_is_named() -> None:
    t = target("http://127.0.0.1:9")
    with pytest.raises(ClusterError, match="127.0.0.1:9"):
        t.scale(workers=0)
    with pytest.raises(ClusterError, match=r"No Ray dashboard answers on http://127.0.0.1:9 .target_options.dashboard_url"):
        t.current_serve_config()
