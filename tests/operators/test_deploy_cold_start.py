"""After RUNNING the deploy reads each new replica's cold start through the dashboard, and it reaches the run record,
the demo summary and the benchmark report.

The dashboard here replays the answers Ray gave for one real replica (tests/fixtures/cold_start/, see its README),
on 127.0.0.1, to the local target's real hook; the whole path on a real cluster is test_local_pipeline's good run.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.fixtures.http_standin import JsonHandler, serve_http

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/cold_start"
APP = "llm"


def recorded() -> dict[str, Any]:
    app = json.loads((FIXTURE / "serve_app.json").read_text())
    replica = app["deployments"]["LLMServer"]["replicas"][0]
    return {"app": app, "replica": replica, "actor": json.loads((FIXTURE / "logical_actor.json").read_text())}


@pytest.fixture()
def dashboard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The recorded answers on a loopback port, the local target pointed at it; yields the paths asked."""
    rec = recorded()
    asked: list[str] = []

    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            asked.append(self.path)
            if url.path == "/api/serve/applications/":
                return self._json({"applications": {APP: rec["app"]}})
            if url.path == f"/logical/actors/{rec['replica']['actor_id']}":
                return self._json({"result": True, "data": {"detail": rec["actor"]}})
            if url.path == "/api/v0/logs/file":
                if query.get("actor_id") == rec["replica"]["actor_id"] and query.get("suffix") in ("out", "err"):
                    return self._text((FIXTURE / f"worker.{query['suffix']}").read_bytes())
                if query.get("filename") == rec["replica"]["log_file_path"].lstrip("/"):
                    return self._text((FIXTURE / "serve_replica.log").read_bytes())
            self.send_error(404)

        def _text(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    with serve_http(Handler) as port:
        monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path))
        monkeypatch.setenv("RAYLIFT_DASHBOARD_PORT", str(port))
        yield asked


def deploy_op() -> Any:
    from raylift.operators.deploy import ServeDeployOperator

    return ServeDeployOperator(task_id="deploy", artifact={}, model={}, served_name="tiny-llama", app_name=APP,
                               deferrable=False)


def test_the_deploy_reads_each_new_replica_by_phase_and_keeps_it_for_the_report(
    dashboard: list[str], capsys: pytest.CaptureFixture[str],
) -> None:
    op = deploy_op()
    rec = recorded()
    cold = op.collect_cold_start(APP, rec["app"]["last_deployed_time_s"] + 42, "manual__cold")
    assert "note" not in cold, cold
    [replica] = cold["replicas"]
    assert replica["replica_id"] == "kwg6xu5b" and replica["total_s"] == pytest.approx(40.344)
    assert replica["phases_s"]["weights_load"] == 0.01 and replica["phases_s"]["engine_init"] == 6.23
    assert any("lines=" in p and "suffix=err" in p for p in dashboard)  # the log API, as Ray's CLI asks it
    assert "cold start of app 'llm', replica kwg6xu5b: total 40.344 s" in capsys.readouterr().out  # the task log
    # kept in the run's folder, where the benchmark report finds it
    from raylift.release.state import run_file

    stored = op.state_for(APP).store.read_json(run_file("manual__cold", "cold_start"))
    assert stored == cold


def test_an_unreadable_dashboard_leaves_a_note_and_the_deploy_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path))
    monkeypatch.setenv("RAYLIFT_DASHBOARD_PORT", "9")  # nothing listens
    cold = deploy_op().collect_cold_start(APP, 0.0, "manual__none")
    assert cold["replicas"] == [] and "ClusterError" in cold["note"], cold


def test_record_summary_and_report_show_the_phases(dashboard: list[str], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from raylift.demo_summary import print_cold_start
    from raylift.measure.report import cold_start_html
    from raylift.run_record import build_record

    steps = {"read_and_fit_check_s": 0.9, "engine_args_check_s": 10.2, "serve_write_s": 0.1, "serve_to_running_s": 48.5}
    cold = deploy_op().collect_cold_start(APP, recorded()["app"]["last_deployed_time_s"] + 42, "manual__r", steps)
    record = build_record(run_id="manual__r", target="local", params={},
                          parts={"deployed": {"running_at": "2026-11-27T01:37:58+00:00", "cold_start": cold},
                                 "smoke": {"stream": {"first_token_at": "2026-11-27T01:37:59+00:00",
                                                      "ttft_s": 0.157}}})
    assert record["cold_start"]["replicas"] == cold["replicas"]
    assert record["cold_start"]["first_token_s"] == 0.157
    assert record["cold_start"]["deploy_steps_s"] == steps  # the deploy step's own phases, as the deploy gave them
    print_cold_start(record["cold_start"])
    out = capsys.readouterr().out
    assert "  engine_init                    6.23" in out and "first token: 0.157 s" in out, out
    assert "deploy step: read and fit check 0.9 s, engine args check 10.2 s, serve write 0.1 s, serve to running " \
           "48.5 s" in out, out
    page = cold_start_html(cold)
    assert '<table id="cold-start"' in page and "<td>6.23</td>" in page and "<td>40.344</td>" in page
    assert cold_start_html({"replicas": []}) == ""  # no replica read: no section
