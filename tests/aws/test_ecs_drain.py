"""Blue/green's drain on ECS (issue 55, item 4): blue is retired when its Serve proxy carries no request.

The expositions below are what Ray 2.60 exports on a node's metrics port: the gauge Serve's proxy keeps
(ray/serve/_private/request_ingress_metrics.py: ``serve_num_ongoing_http_requests``, tags node_id and
node_ip_address; set by ray/serve/_private/proxy.py as each request starts and ends), under the "ray" namespace
Ray's metrics agent adds (ray/_private/metrics_agent.py), with the exporter's own tags. Ray exports no series for a
gauge never set (a proxy that never took a request).
"""

from __future__ import annotations

import pytest

from raylift.triggers.drain import ServeIngressDrainedTrigger, ongoing_requests

TAGS = 'Component="core_worker",NodeAddress="10.0.1.5",SessionName="s",Version="2.60.0",node_ip_address="10.0.1.5"'
HEAD = """# HELP ray_serve_num_ongoing_http_requests The number of ongoing requests in this HTTP Proxy.
# TYPE ray_serve_num_ongoing_http_requests gauge
ray_serve_num_ongoing_http_requests{%s,node_id="a"} %s
ray_serve_num_ongoing_http_requests{%s,node_id="b"} %s
# HELP ray_serve_num_ongoing_grpc_requests The number of ongoing requests in this gRPC Proxy.
# TYPE ray_serve_num_ongoing_grpc_requests gauge
ray_serve_num_ongoing_grpc_requests{%s,node_id="a"} 7.0
"""


def exposition(a: float, b: float) -> str:
    return HEAD % (TAGS, a, TAGS, b, TAGS)


def test_the_proxy_gauge_is_summed_over_its_series_and_absent_reads_zero() -> None:
    assert ongoing_requests(exposition(2.0, 1.0)) == 3.0  # gRPC's gauge is not the HTTP endpoint's
    assert ongoing_requests(exposition(0.0, 0.0)) == 0.0
    assert ongoing_requests("# TYPE ray_node_mem_used gauge\nray_node_mem_used 5.0\n") == 0.0


def trigger(hold_until: float = 0.0, quiet_polls: int = 2) -> ServeIngressDrainedTrigger:
    return ServeIngressDrainedTrigger("http://10.0.1.5:8080/metrics", hold_until=hold_until, timeout_s=60,
                                      quiet_polls=quiet_polls)


def test_the_wait_ends_after_quiet_polls_in_a_row_and_never_inside_the_ttl() -> None:
    t = trigger()
    assert t.evaluate({"ongoing": 0.0, "at": 10.0}) is None  # one 0 may be a report from before a request
    assert t.evaluate({"ongoing": 1.0, "at": 11.0}) is None  # a stream: the count starts over
    assert t.evaluate({"ongoing": 0.0, "at": 12.0}) is None
    assert t.evaluate({"ongoing": 0.0, "at": 13.0}) == {"status": "success", "ongoing": 0}
    held = trigger(hold_until=100.0)
    assert held.evaluate({"ongoing": 0.0, "at": 98.0}) is None
    assert held.evaluate({"ongoing": 0.0, "at": 99.0}) is None  # quiet, but a resolver may still hold blue's IP
    assert held.progress({"ongoing": 0.0, "at": 99.0})[0] == "0 request(s) in flight, 1 s of the DNS TTL left"
    assert held.evaluate({"ongoing": 0.0, "at": 100.0}) == {"status": "success", "ongoing": 0}


def test_the_trigger_serializes_what_the_triggerer_needs_and_nothing_secret() -> None:
    path, kwargs = trigger(hold_until=5.0).serialize()
    assert path == "raylift.triggers.drain.ServeIngressDrainedTrigger"
    again = ServeIngressDrainedTrigger(**kwargs)
    assert (again.metrics_url, again.hold_until, again.timeout_s, again.quiet_polls) == (
        "http://10.0.1.5:8080/metrics", 5.0, 60.0, 2)


def test_an_answer_that_is_no_exposition_is_refused() -> None:
    with pytest.raises(ValueError):
        ongoing_requests("not a metric line {")


class Blue:
    """A target with a drain wait to defer on (ECS's ``drain_trigger``/``retire_cluster(cluster, drained)``): what
    the promote step calls, in order. raylift's ECS target itself is judged against moto in test_ecs_blue_green."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def switch_endpoint(self, to: str, *, timeout_s: float | None = None) -> None:
        self.calls.append(("switch", to))

    def drain_trigger(self, cluster: str) -> ServeIngressDrainedTrigger:
        self.calls.append(("drain_trigger", cluster))
        return trigger()

    def retire_cluster(self, cluster: str, drained: dict[str, object] | None = None) -> str:
        self.calls.append(("retire", drained))
        return f"{cluster} retired"


def test_a_deferrable_promote_waits_for_blues_drain_in_the_triggerer(tmp_path: object,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from airflow.sdk.exceptions import TaskDeferred

    from raylift.operators.promote import PromoteReleaseOperator
    from raylift.release.blue_green import RETIRED, STARTED
    from raylift.release.state import DeploymentState
    from raylift.store import LocalStore

    blue = Blue()
    state = DeploymentState(LocalStore(Path(str(tmp_path))), "ecs", "llm")
    state.save_blue_green("run-1", {"serving": "ray-head", "candidate": "ray-head-green", "stage": STARTED})
    monkeypatch.setattr(PromoteReleaseOperator, "target_impl", property(lambda self: blue))
    monkeypatch.setattr(PromoteReleaseOperator, "state_for", lambda self, name: state)
    monkeypatch.setattr(PromoteReleaseOperator, "_record", lambda self, context, config, decision: {"done": config})
    op = PromoteReleaseOperator(task_id="promote", deployed={"release": "blue_green", "serve_config": {"a": 1}},
                                decision={"action": "promote"}, target="ecs", deferrable=True)
    context = {"run_id": "run-1"}
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    assert isinstance(deferred.value.trigger, ServeIngressDrainedTrigger)
    assert deferred.value.method_name == "blue_drained"
    assert blue.calls == [("switch", "ray-head-green"), ("drain_trigger", "ray-head")]  # switched, nothing retired
    assert op.blue_drained(context, {"status": "success", "ongoing": 0}) == {"done": {"a": 1}}
    assert blue.calls[-1] == ("retire", {"status": "success", "ongoing": 0})
    record = state.blue_green("run-1")
    assert record is not None and record["stage"] == RETIRED
