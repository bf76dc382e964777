"""The local target's workers start together and all join, judged by real Ray: its state API lists the nodes ALIVE,
and its own node table (``ray.nodes()``, from a driver in the runtime env) names each node's plasma and raylet sockets.

Why the sockets: Ray names a node's sockets by the first unused ``plasma_store.N`` / ``raylet.N`` in its temp dir's
``sockets/`` folder, chosen before the node binds them, so two nodes starting together in one folder can pick the same
name and one dies with "bind: Address already in use" (the drain test's cluster, 3 tries of 3, in session 28's run 15).
``LocalRayCluster.scale`` starts its workers without waiting between them, so each worker has a temp dir of its own.

Ports 22800-22899: a block of the drain test's 22xxx that neither it nor any stack uses.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from raylift.config import LocalSettings
from raylift.local.cluster import LocalRayCluster

GCS, DASHBOARD, CLIENT, AGENT_BASE, SERVE = 22879, 22865, 22801, 22866, 22810
START_TIMEOUT_S = 180
NODE_TABLE = """
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(json.dumps([{k: n[k] for k in ("Alive", "Resources", "ObjectStoreSocketName", "RayletSocketName")}
                  for n in ray.nodes()]))
"""


def test_two_workers_started_together_both_join_each_with_its_own_sockets(tmp_path: Path) -> None:
    settings = LocalSettings(home=tmp_path, gcs_port=GCS, dashboard_port=DASHBOARD, client_server_port=CLIENT,
                             agent_port_base=AGENT_BASE, serve_port=SERVE)
    if not settings.runtime_python.exists():
        pytest.fail("runtime venv missing (make setup)")
    cluster = LocalRayCluster(settings)
    try:
        nodes = cluster.scale(2)  # the head, then both workers at once
        assert sorted(nodes) == ["head", "worker-0", "worker-1"]
        deadline = time.monotonic() + START_TIMEOUT_S
        while len(cluster.dashboard.alive_nodes()) < 3:  # scale() returns once the dashboard is up
            dead = sorted(set(nodes) - set(cluster.nodes()))  # nodes() forgets the ones that exited
            logs = {role: (cluster.dir / f"{role}.log").read_text(errors="replace")[-1500:] for role in dead}
            assert not dead, f"Ray nodes exited while starting: {logs}"
            assert time.monotonic() < deadline, (
                f"3 nodes not ALIVE in {START_TIMEOUT_S} s: {cluster.dashboard.alive_nodes()}")
            time.sleep(1)

        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RAY_ADDRESS")}
        table = subprocess.run([str(settings.runtime_python), "-c", NODE_TABLE, f"127.0.0.1:{GCS}"],
                               capture_output=True, text=True, timeout=120, env=env | {"RAY_AUTH_MODE": "disabled"})
        assert table.returncode == 0, table.stderr[-2000:]
        alive = [n for n in json.loads(table.stdout.strip().splitlines()[-1]) if n["Alive"]]
        assert len(alive) == 3, alive
        sockets = [name for n in alive for name in (n["ObjectStoreSocketName"], n["RayletSocketName"])]
        assert len(set(sockets)) == 6, sockets
        # each worker's sockets in a folder of its own, under the cluster's temp dir: no name two starts can share
        for index in (0, 1):
            (worker,) = [n for n in alive if LocalRayCluster.node_tag(f"worker-{index}") in n["Resources"]]
            own = cluster.worker_temp_dir(index)
            assert all(Path(s).is_relative_to(own) for s in (worker["ObjectStoreSocketName"],
                                                             worker["RayletSocketName"])), (own, worker)
    finally:
        # every node exits on SIGTERM within the grace, none needs the group's SIGKILL (Ray 2.60's own SIGTERM drain
        # waited 30 s on the head: local/cluster.py's node environment)
        ended = cluster.stop(grace_s=20)
    assert ended == {"worker-0": "SIGTERM", "worker-1": "SIGTERM", "head": "SIGTERM"}, ended
    assert cluster.nodes() == {}
