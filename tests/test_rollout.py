"""Which config changes restart replicas, and how a start-before-stop rollout is asked of Serve."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from raylift.release.rollout import restarts_replicas, surge_percent, with_native_surge, with_surge
from raylift.serve.config import app_by_name, load_config, merge_app, render_app

CONFIGS = Path(__file__).resolve().parents[1] / "serve_apps/configs"


@pytest.fixture()
def running() -> dict:
    base = load_config(CONFIGS / "llm-cpu.yaml")
    app = render_app(base, app_name="llm", working_dir="file:///a.zip", args={"model": "/m"}, replicas=1)
    other = {**copy.deepcopy(app), "name": "other", "route_prefix": "/other"}
    return merge_app(merge_app({}, other, defaults=base), app, defaults=base)


def changed(config: dict, fn) -> dict:  # noqa: ANN001 - a small mutator
    new = copy.deepcopy(config)
    fn(app_by_name(new, "llm"))
    return new


@pytest.mark.parametrize(
    "mutate",
    [
        lambda a: a["args"].update(fail_on_start="boom"),
        lambda a: a["runtime_env"].update(working_dir="file:///b.zip"),
        lambda a: a["deployments"][0]["ray_actor_options"].update(num_cpus=2),
        lambda a: a["deployments"][0].update(autoscaling_config={"min_replicas": 1, "max_replicas": 1}),
    ],
    ids=["args", "working_dir", "actor_options", "fixed_to_autoscaling"],
)
def test_code_updates_restart_replicas(running: dict, mutate) -> None:  # noqa: ANN001
    assert restarts_replicas(app_by_name(running, "llm"), app_by_name(changed(running, mutate), "llm"))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda a: a["deployments"][0].update(num_replicas=3),
        lambda a: a["deployments"][0].update(user_config={"x": 1}),
        lambda a: a["deployments"][0].update(max_ongoing_requests=8),
    ],
    ids=["num_replicas", "user_config", "max_ongoing_requests"],
)
def test_lightweight_updates_keep_replicas(running: dict, mutate) -> None:  # noqa: ANN001
    new = changed(running, mutate)
    assert not restarts_replicas(app_by_name(running, "llm"), app_by_name(new, "llm"))


def test_autoscaling_bounds_change_is_lightweight(running: dict) -> None:
    """Within autoscaling, changing the bounds keeps the replicas (only the switch restarts them)."""
    scaled = changed(running, lambda a: a["deployments"][0].update(autoscaling_config={"min_replicas": 1, "max_replicas": 2}))
    wider = changed(scaled, lambda a: a["deployments"][0]["autoscaling_config"].update(max_replicas=4))
    assert not restarts_replicas(app_by_name(scaled, "llm"), app_by_name(wider, "llm"))
    assert restarts_replicas(app_by_name(wider, "llm"), app_by_name(running, "llm"))  # back to a fixed count


def test_native_surge_is_a_lightweight_option(running: dict) -> None:
    surged = with_native_surge(app_by_name(running, "llm"), 1)
    assert surged["deployments"][0]["max_surge_percent"] == 100  # 1 replica: one more during a restart
    # adding it restarts nothing (Ray Serve 2.60's DeploymentConfig marks the field LightWeight), so a first
    # deploy with it after the app ran without it is not a code update; Serve's acceptance of it is checked
    # by every integration deploy
    assert not restarts_replicas(app_by_name(running, "llm"), surged)
    assert with_native_surge(app_by_name(running, "llm"), 0) == app_by_name(running, "llm")


@pytest.mark.parametrize("replicas", [1, 2, 3, 7, 10, 64, 150, 1000])
@pytest.mark.parametrize("extra", [1, 2, 3])
def test_surge_percent_gives_the_extra_replicas(replicas: int, extra: int) -> None:
    def serve_surge(percent: int) -> int:  # Ray Serve 2.60's DeploymentState._surge_replicas_to_start
        return (percent * replicas + 99) // 100

    percent = surge_percent(extra, replicas)
    assert 0 < percent <= 100
    if extra > replicas:
        assert percent == 100
    elif replicas <= 100:  # whole percents can name every count
        assert serve_surge(percent) == extra
    else:  # 1 % is more than one replica: the least percent that gives at least ``extra``
        assert serve_surge(percent) >= extra > serve_surge(percent - 1)


def test_surge_raises_autoscaling_floor_and_keeps_zero_replica_apps() -> None:
    app = {
        "name": "a",
        "deployments": [
            {"name": "auto", "autoscaling_config": {"min_replicas": 0, "max_replicas": 5}},
            {"name": "fixed", "num_replicas": 0},
        ],
    }
    deps = {d["name"]: d for d in with_surge(app, 1)["deployments"]}
    assert deps["auto"]["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 5}
    assert deps["fixed"]["num_replicas"] == 0
