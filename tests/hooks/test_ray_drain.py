"""raylift's drain path against a real Ray cluster: a head and two workers started from the runtime venv on
127.0.0.1 (plain ``ray start``, no Serve, no vLLM), each in its own process group, stopped at the end.

Ray's own state API is the oracle: the drained worker is listed DEAD ("Terminated due to preemption: <our
reason>"), the other worker and the head stay ALIVE."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from raylift.hooks.ray_drain import RayDrainHook, removal_order
from raylift.targets.scale_in import request_drain
from raylift.triggers.drain import RayNodesDrainedTrigger
from tests.harness.local_stack import ROOT

RAY = ROOT / ".cache/venvs/runtime/bin/ray"
# Ports of this test's nodes: 22xxx, a block no other test or local stack uses (the multi-worker heads take
# 30xxx/31xxx, the pipelines' stacks 20xxx-29xxx by thousands other than 22xxx), below the ephemeral range.
HEAD_GCS, HEAD_DASHBOARD, HEAD_CLIENT = 22279, 22265, 22001
NODE_BASES = {"head": 22000, "w1": 22300, "w2": 22600}  # + the offsets below, per node
NODE_OFFSETS = {"node-manager-port": 70, "object-manager-port": 71, "dashboard-agent-listen-port": 66,
                "dashboard-agent-grpc-port": 67, "runtime-env-agent-port": 68, "metrics-export-port": 69,
                "min-worker-port": 100, "max-worker-port": 199}
DASHBOARD = f"http://127.0.0.1:{HEAD_DASHBOARD}"
REASON = "raylift drain test"


@dataclass
class Node:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


def _start(name: str, home: Path, temp_dir: str) -> Node:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "RAY_ADDRESS")}
    env |= {"RAY_USAGE_STATS_ENABLED": "0", "PATH": f"{RAY.parent}:{env.get('PATH', '')}"}
    base = NODE_BASES[name]
    ports = [f"--{flag}={base + offset}" for flag, offset in NODE_OFFSETS.items()]
    # a temp dir per node (Ray allows one per node): nodes starting at once in one folder can pick the same
    # plasma socket name, and one of them fails to bind it (seen in run 15 beside the other lanes, 3 tries of 3)
    common = ["--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1", "--object-store-memory=100000000",
              f"--temp-dir={temp_dir}/{name}", *ports]
    if name == "head":
        role = ["--head", f"--port={HEAD_GCS}", f"--dashboard-port={HEAD_DASHBOARD}", "--dashboard-host=127.0.0.1",
                "--include-dashboard=true", f"--ray-client-server-port={HEAD_CLIENT}", "--num-cpus=1"]
    else:  # a custom resource of its own: the test tells the workers apart by it
        role = [f"--address=127.0.0.1:{HEAD_GCS}", "--num-cpus=1", f"--resources={json.dumps({name: 1})}"]
    log = home / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(RAY), "start", *role, *common], stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=home, start_new_session=True)
    return Node(name, proc, log)


def _stop(node: Node) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(node.proc.pid, sig)  # its own session: the node's raylet, agents and workers
        except ProcessLookupError:
            return
        try:
            node.proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue


def _alive(timeout_s: float, want: int, nodes: list[Node]) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [n for n in _listed() if n["state"] == "ALIVE"]
        if len(alive) >= want:
            return alive
        dead = [n for n in nodes if n.proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "\n".join(f"{n.name}: {n.log.read_text()[-1500:]}" for n in nodes)
            raise AssertionError(f"the Ray test cluster did not come up ({[n.name for n in dead]} exited):\n{logs}")
        time.sleep(1)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Node]]:
    if not RAY.exists():
        pytest.fail("runtime venv missing (make setup)")
    home = tmp_path_factory.mktemp("drain")
    with ExitStack() as cleanup:
        nodes: dict[str, Node] = {}
        temp_dir = f"/tmp/raylift-drain-{os.getpid()}"
        cleanup.callback(shutil.rmtree, temp_dir, True)  # registered first: removed once every node is stopped
        # the head first, then both workers at once (one after the other took ~45 s more on a loaded box)
        for group in (("head",), ("w1", "w2")):
            missing = list(group)
            for attempt in range(1, 4):  # Ray's raylet gives its agent a fixed time to start: again when it ran out
                for name in missing:
                    nodes[name] = _start(name, home, temp_dir)
                    cleanup.callback(_stop, nodes[name])  # the head's registered first: stopped last
                try:
                    _alive(180, len(nodes), list(nodes.values()))
                    break
                except AssertionError:
                    if attempt == 3 or nodes["head"].proc.poll() is not None:
                        raise
                    up = {r for n in _listed() if n["state"] == "ALIVE" for r in n.get("resources_total", {})}
                    missing = [name for name in group if name not in up and name != "head"] or list(group)
                    for name in missing:
                        _stop(nodes[name])
        yield nodes


def _job(hook: RayDrainHook, entrypoint: str) -> None:
    from raylift.triggers.ray_job import RayJobFinishedTrigger

    job = hook.submit_job(entrypoint)
    event = RayJobFinishedTrigger(DASHBOARD, job, timeout_s=120).wait()
    assert event.get("job_status") == "SUCCEEDED", (event, hook.job_logs(job))


def test_raylift_drains_the_idlest_worker_and_ray_reports_it_dead(cluster: dict[str, Node]) -> None:
    hook = RayDrainHook(DASHBOARD)
    # a detached actor on w1, placed by a Ray job: Ray's state API then shows w1 busier than w2
    script = ("import ray\nray.init()\n@ray.remote(num_cpus=0, resources={'w1': 0.01})\nclass Keep:\n"
              "    def ping(self):\n        return 1\n"
              "ray.get(Keep.options(name='keep', lifetime='detached').remote().ping.remote())\n")
    _job(hook, f"python -c {shlex.quote(script)}")

    nodes = hook.nodes_with_load()
    ids = {name: next(n.node_id for n in nodes if any(name in r for r in _resources(n.node_id)))
           for name in ("w1", "w2")}
    head = next(n.node_id for n in nodes if n.is_head)
    order = removal_order({n.node_id: [n] for n in nodes})
    assert order[0] == ids["w2"] and head not in order, (order, ids)  # fewest actors first; never the head

    request_drain(hook, [ids["w2"]], reason_message=REASON, deadline_s=60)  # the scale step's own call
    event = RayNodesDrainedTrigger(DASHBOARD, [ids["w2"]], timeout_s=120, poll_interval_s=1).wait()
    assert event["status"] == "success", event

    listed = {n["node_id"]: n for n in _listed()}  # Ray's own state API, read here
    assert listed[ids["w2"]]["state"] == "DEAD"
    assert listed[ids["w2"]]["state_message"] == f"Terminated due to preemption: {REASON}"
    assert (listed[ids["w1"]]["state"], listed[head]["state"]) == ("ALIVE", "ALIVE")
    # the drained node's `ray start --block` keeps running (its raylet ended as Ray expects, which it does not
    # report): an ECS task or a pod is not ended by the drain, so the scale-in stops it itself
    assert (cluster["w2"].proc.poll(), cluster["w1"].proc.poll()) == (None, None)


def _listed() -> list[dict]:
    """Every node Ray's state API lists (none while the head's dashboard is not up)."""
    try:
        return list(httpx.get(f"{DASHBOARD}/api/v0/nodes?detail=1", timeout=10).json()["data"]["result"]["result"])
    except (httpx.TransportError, KeyError, ValueError):
        return []


def _resources(node_id: str) -> list[str]:
    return [name for n in _listed() if n["node_id"] == node_id for name in n.get("resources_total", {})]


def test_a_drain_past_its_deadline_is_a_timeout_naming_the_node(cluster: dict[str, Node]) -> None:
    """A node Ray has not drained (w1, never asked) keeps the wait going until its deadline: a timeout event that
    names it, which the scale step turns into its failure with the capacity unchanged."""
    hook = RayDrainHook(DASHBOARD)
    w1 = next(n.node_id for n in hook.nodes_with_load() if "w1" in _resources(n.node_id))
    event = RayNodesDrainedTrigger(DASHBOARD, [w1], timeout_s=2, poll_interval_s=0.5).wait()
    assert event["status"] == "timeout" and w1 in event["message"] and event["not_drained"] == [w1]
