"""The Serve REST PUT waits as long as Ray's dashboard may take to start Serve, and sends the config again when
Ray answers that Serve's proxies were not up in its own bound.

Seen in make test on a loaded 2-core box: the first PUT to a fresh cluster ran past the hook's 30 s read timeout
(reported as "Cannot reach the Ray dashboard"), and another got Ray's 500 "HTTP proxies not available after 60s."
while the controller went on starting them. The dashboard here is an HTTP stand-in answering with Ray's own
message; Ray's bound is read from Ray's own constants module.
"""

from __future__ import annotations

import json
import time
from typing import Any, ClassVar

import pytest

from raylift.errors import ClusterError, DeployError
from raylift.hooks.ray_dashboard import SERVE_PROXY_START_S, START_ATTEMPTS, RayDashboardHook
from tests.fixtures.http_standin import JsonHandler, serve_http

CONFIG = {"applications": [{"name": "hello", "import_path": "hello:app"}]}


def test_the_bound_is_rays_own() -> None:
    from ray.serve._private.constants import HTTP_PROXY_TIMEOUT

    assert SERVE_PROXY_START_S == HTTP_PROXY_TIMEOUT


class SlowStart(JsonHandler):
    """A dashboard whose PUT answers after ``delay_s``, first ``not_ready`` times with Ray's 500."""

    delay_s: ClassVar[float] = 0.0
    not_ready: ClassVar[int] = 0
    puts: ClassVar[list[dict[str, Any]]] = []

    def do_PUT(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).puts.append(body)
        time.sleep(self.delay_s)
        if len(self.puts) <= self.not_ready:
            self._text(500, f"Traceback (most recent call last):\n  ...\nTimeoutError: HTTP proxies not available "
                            f"after {SERVE_PROXY_START_S}s.")
            return
        self._json({})


def dashboard(delay_s: float = 0.0, not_ready: int = 0) -> type[SlowStart]:
    return type("Dashboard", (SlowStart,), {"delay_s": delay_s, "not_ready": not_ready, "puts": []})


def test_a_put_waits_past_the_hooks_read_timeout_while_serve_starts() -> None:
    handler = dashboard(delay_s=2.0)
    with serve_http(handler) as port:
        RayDashboardHook(f"http://127.0.0.1:{port}", timeout_s=0.5).put_serve_config(CONFIG)
    assert handler.puts == [CONFIG]


def test_proxies_not_up_in_rays_bound_sends_the_same_config_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("raylift.hooks.ray_dashboard.START_RETRY_WAIT_S", 0.1)
    handler = dashboard(not_ready=START_ATTEMPTS - 1)
    with serve_http(handler) as port:
        RayDashboardHook(f"http://127.0.0.1:{port}").put_serve_config(CONFIG)
    assert handler.puts == [CONFIG] * START_ATTEMPTS
    # still not up after the last attempt: Ray's own answer, named
    handler = dashboard(not_ready=START_ATTEMPTS)
    with serve_http(handler) as port, pytest.raises(DeployError, match=r"(?s)refused the config \(500\).*HTTP proxies"):
        RayDashboardHook(f"http://127.0.0.1:{port}").put_serve_config(CONFIG)
    assert len(handler.puts) == START_ATTEMPTS


def test_any_500_is_sent_again_and_the_error_names_the_tracebacks_last_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dashboard's catch-all answers 500 with the whole traceback (init_ray_and_catch_exceptions): the cause is
    its last line, past the first 1000 characters."""
    monkeypatch.setattr("raylift.hooks.ray_dashboard.START_RETRY_WAIT_S", 0.1)

    class Failing(JsonHandler):
        puts: ClassVar[int] = 0

        def do_PUT(self) -> None:  # noqa: N802
            type(self).puts += 1
            self.rfile.read(int(self.headers["Content-Length"]))
            frames = "".join(f'  File "/ray/dashboard/x.py", line {n}, in handler\n    await step_{n}()\n' for n in range(40))
            self._text(500, "Traceback (most recent call last):\n" + frames
                       + "ray.exceptions.GetTimeoutError: Get timed out: some object(s) not ready.\n")

    with serve_http(Failing) as port, pytest.raises(DeployError) as failed:
        RayDashboardHook(f"http://127.0.0.1:{port}").put_serve_config(CONFIG)
    assert Failing.puts == START_ATTEMPTS
    first_line = str(failed.value).splitlines()[0]
    assert first_line.startswith("Ray Serve refused the config (500): ray.exceptions.GetTimeoutError: Get timed out"), (
        first_line)


def test_any_other_refusal_is_not_sent_again() -> None:
    class Invalid(JsonHandler):
        puts: ClassVar[int] = 0

        def do_PUT(self) -> None:  # noqa: N802
            type(self).puts += 1
            self.rfile.read(int(self.headers["Content-Length"]))
            self._text(400, "invalid")

    with serve_http(Invalid) as port, pytest.raises(DeployError, match=r"\(400\): invalid"):
        RayDashboardHook(f"http://127.0.0.1:{port}").put_serve_config(CONFIG)
    assert Invalid.puts == 1


def test_a_read_timeout_says_the_dashboard_did_not_answer_not_that_it_is_unreachable() -> None:
    class Silent(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            time.sleep(2)
            self._json({})

    with serve_http(Silent) as port, pytest.raises(ClusterError, match=r"did not answer GET /api/v0/nodes within 1 s"):
        RayDashboardHook(f"http://127.0.0.1:{port}", timeout_s=1).cluster_state()


def test_a_job_sent_before_the_heads_job_agent_is_up_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's own answer while a just-started head has no job agent (job_head.py): 500, "please try again later"."""
    monkeypatch.setattr("raylift.hooks.ray_dashboard.START_RETRY_WAIT_S", 0.1)

    class AgentLate(JsonHandler):
        posts: ClassVar[int] = 0

        def do_POST(self) -> None:  # noqa: N802
            type(self).posts += 1
            self.rfile.read(int(self.headers["Content-Length"]))
            if self.posts == 1:
                self._text(500, "No available agent to submit job, please try again later.")
                return
            self._json({"submission_id": "raysubmit_1"})

    with serve_http(AgentLate) as port:
        assert RayDashboardHook(f"http://127.0.0.1:{port}").submit_job("python -V") == "raysubmit_1"
    assert AgentLate.posts == 2


def test_every_dashboard_call_shares_one_tls_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """httpx builds a TLS context for each call or client it is not given one (the CA bundle parsed again: 48 ms of
    CPU here, plain-HTTP dashboard or not); the hook's calls, sync and async, build one per process. Counted at
    OpenSSL's CA load, which still runs (a counting pass-through)."""
    import asyncio
    import ssl

    from raylift.hooks.ray_dashboard import tls_context

    loads: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        real(self, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    tls_context.cache_clear()

    class Apps(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            self._json({"applications": {}})

    with serve_http(Apps) as port:
        hook = RayDashboardHook(f"http://127.0.0.1:{port}")
        for _ in range(3):
            assert hook.is_up()
            assert hook.serve_applications() == {"applications": {}}
            assert hook.poll_serve_applications() == {"applications": {}}
            assert asyncio.run(hook.aserve_applications()) == {"applications": {}}
    assert len(loads) == 1, loads
