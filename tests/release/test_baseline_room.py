"""The canary's fresh baseline arm on ``local``: room chosen for it, so ``make demo``'s one 2-CPU node runs the
serving app, the canary and a baseline free of live traffic (before: "no room for a fresh baseline replica")."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from raylift.release.canary import plan_canary, same_config_arms
from raylift.release.decision import FRESH_ANCHOR, SERVING
from raylift.serve.validation import Cluster, check_fit
from raylift.targets.local import LocalTarget

LLM_CPU = Path(__file__).resolve().parents[2] / "serve_apps" / "configs" / "llm-cpu.yaml"
DEMO_NODE = Cluster({"CPU": 2.0}, ({"CPU": 2.0},))  # make demo: one node, RAYLIFT_HEAD_CPUS 2


def _app() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(LLM_CPU.read_text())["applications"][0])


def _fits(app: dict[str, Any], others: list[dict[str, Any]]) -> None:
    check_fit(app, DEMO_NODE, others=others)


def test_on_the_demo_node_the_baseline_fits_only_with_the_local_room() -> None:
    serving = _app()
    current = {"applications": [serving]}
    candidate = {**_app(), "args": {**serving["args"], "served_model_name": "tiny-llama-2"}}
    without = plan_canary(candidate, current, "llm", _fits, anchor_app=serving)
    assert without.baseline_runs == SERVING and "no room for a fresh baseline" in without.baseline_note
    plan = plan_canary(candidate, current, "llm", _fits, anchor_app=serving, room=LocalTarget.baseline_arm_room)
    assert plan.baseline_runs == FRESH_ANCHOR and plan.baseline is not None and not plan.lent
    (dep,) = plan.baseline["deployments"]
    assert dep["ray_actor_options"]["num_cpus"] == 0.0
    # the engine keeps the OpenMP threads Ray gives the canary's num_cpus 1 (max(floor(1), 1))
    assert dep["ray_actor_options"]["runtime_env"]["env_vars"] == {"OMP_NUM_THREADS": "1"}
    # the canary is as the user wrote it: 1 logical CPU
    assert plan.canary["deployments"][0]["ray_actor_options"]["num_cpus"] == 1
    assert not same_config_arms(plan)  # another served name: not an A/A


def test_the_room_keeps_accelerators_and_a_thread_count_the_app_chose() -> None:
    app = _app()
    app["runtime_env"]["env_vars"]["OMP_NUM_THREADS"] = "3"
    app["deployments"].append({"name": "Gpu", "ray_actor_options": {"num_cpus": 4, "num_gpus": 1}})
    app["deployments"].append({"name": "Big", "ray_actor_options": {"num_cpus": 2.5}})
    roomed = LocalTarget.baseline_arm_room(app)
    llm, gpu, big = roomed["deployments"]
    # the app's own OMP_NUM_THREADS stands (the deployment's env_vars would be merged over it)
    assert llm["ray_actor_options"] == {"num_cpus": 0.0}
    assert gpu["ray_actor_options"] == {"num_cpus": 4, "num_gpus": 1}
    assert big["ray_actor_options"] == {"num_cpus": 0.0}
    assert app["deployments"][0]["ray_actor_options"] == {"num_cpus": 1}  # the source is not changed


def test_a_canary_of_the_anchors_own_config_is_an_a_a() -> None:
    serving = _app()
    plan = plan_canary(_app(), {"applications": [serving]}, "llm", _fits, anchor_app=serving,
                       room=LocalTarget.baseline_arm_room)
    assert plan.baseline_runs == FRESH_ANCHOR and same_config_arms(plan)
