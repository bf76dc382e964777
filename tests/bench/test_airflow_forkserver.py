"""The suite's warm Airflow CLI (tests/harness/airflow_forkserver.py) ends every command as the plain CLI does.

The judge is the plain ``airflow`` command run as a subprocess on the same Airflow home: the same exit code and error
for a refused ``dags test``, and the stack's environment as it is at each call.
No command here starts a cluster (the refused conf fails before any task runs), so no port is used.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import psutil
import pytest

from tests.harness.local_stack import LocalStack, make_stack


@pytest.fixture(scope="module")
def homes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("forkserver")


def test_a_forked_command_ends_as_the_plain_cli_does(homes: Path) -> None:
    stack = make_stack(homes / "a", port_base=33000, warm_cli=True)
    assert stack.warm_cli is not None
    plain = LocalStack(stack.home, dict(stack.env))  # the same home and environment, the plain CLI
    try:
        # a conf the DAG's Params refuse: Airflow's own error, exit code 1, from both
        refused = [s.airflow("dags", "test", "raylift_teardown", "--conf", json.dumps({"target": "mars"}), timeout=300)
                   for s in (plain, stack)]
        assert [r.returncode for r in refused] == [1, 1], [r.stdout[-1000:] + r.stderr[-1000:] for r in refused]
        for r in refused:
            assert "'mars' is not one of" in r.stdout + r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
        assert stack.warm_cli.proc is not None
        server = psutil.Process(stack.warm_cli.proc.pid)
        # the environment at each call is the one the command sees: a changed setting restarts the warm process
        stack.env["AIRFLOW__CORE__PARALLELISM"] = "3"
        got = stack.airflow("config", "get-value", "core", "parallelism", timeout=300)
        assert (got.returncode, got.stdout.strip()) == (0, "3"), got.stderr[-2000:]
        assert not server.is_running() and stack.warm_cli.proc.pid != server.pid
        # a command over its time limit is killed, as subprocess.run's would be
        with pytest.raises(subprocess.TimeoutExpired):
            stack.airflow("dags", "test", "raylift_teardown", "--conf", json.dumps({"target": "mars"}), timeout=0.5)
    finally:
        pid = stack.warm_cli.proc.pid if stack.warm_cli.proc else None
        stack.warm_cli.close()
    assert pid is None or not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
