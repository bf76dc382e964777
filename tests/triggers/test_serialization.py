"""Every trigger in ``raylift.triggers`` survives Airflow's own storage of a deferral.

A deferred task's trigger is rebuilt on another host from ``serialize()``: the worker serialises the kwargs
(``airflow.sdk.serde``), the API server stores them as JSON in the trigger row, and the triggerer decrypts and
decodes them (``Trigger._decrypt_kwargs``, ``smart_decode_trigger_kwargs``), imports the class by its classpath
and calls it with them (``TriggerRunner.create_triggers``). A trigger whose kwargs do not come back equal
(a tuple, a set, a dataclass, a renamed argument) fails there, in the triggerer, long after the task deferred.
The classes are found by walking the package, so a new trigger is covered without touching this file.
"""

from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
from collections.abc import Callable
from typing import Any

import pytest
from airflow.triggers.base import BaseTrigger

import raylift.triggers

KNOWN = {
    "raylift.triggers.codebuild.CodeBuildBuildTrigger",
    "raylift.triggers.ecs.EcsServicesRunningTrigger",
    "raylift.triggers.rayservice.RayServiceReadyTrigger",
    "raylift.triggers.serve.ServeApplicationsTrigger",
    "raylift.triggers.serve.ServeApplicationGoneTrigger",
    "raylift.triggers.ray_job.RayJobFinishedTrigger",
}

# Constructor arguments by name, for every trigger (old and new names of the AWS triggers' arguments too):
# each trigger is built from its own signature, with every parameter named here. Values differ from the
# defaults so that a serialize() that drops one shows.
SAMPLES: dict[str, Any] = {
    "build_id": "raylift-image:6a1f0c2e-1b7d-4c1e-9a0b-2f6d1c3e4b5a",
    "image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/raylift:3f2a",
    "cluster": "raylift-ray",
    "services": ["raylift-ray-head", "raylift-ray-worker"],
    "want": {"raylift-ray-head": 1, "raylift-ray-worker": 2},
    "aws_conn_id": "aws_raylift",
    "region_name": "us-west-2",
    "waiter_delay": 7,
    "waiter_max_attempts": 13,
    "poll_interval_s": 2.5,
    "timeout_s": 95.0,
    "dashboard_url": "http://10.0.3.17:8265",
    "app_names": ["llm", "translator"],
    "submitted_at": 1767225600.25,
    "name": "llm",
    "submission_id": "raysubmit_Xq3cT8a1bZ",
    "namespace": "raylift",
    "kubernetes_conn_id": "kubernetes_raylift",
    "cluster_context": {"eks_cluster_name": "raylift", "region": "us-west-2", "aws_conn_id": "aws_raylift"},
    "task_arn": "arn:aws:ecs:us-west-2:123456789012:task/raylift-ray/0123456789abcdef",
    "container": "stage",
    "node_ids": ["4f1c0e6a9b2d", "7e3a5c1b8d0f"],
    "unscheduled_fails": True,
    "metrics_url": "http://10.0.3.17:8080/metrics",
    "hold_until": 1767225660.5,
    "quiet_polls": 3,
}


def trigger_classes() -> dict[str, type[BaseTrigger]]:
    """Every concrete BaseTrigger subclass defined in a module of ``raylift.triggers``, by classpath."""
    found: dict[str, type[BaseTrigger]] = {}
    for info in pkgutil.walk_packages(raylift.triggers.__path__, prefix="raylift.triggers."):
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseTrigger) and cls.__module__ == module.__name__ and not inspect.isabstract(cls):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


def build(cls: type[BaseTrigger]) -> tuple[BaseTrigger, dict[str, Any]]:
    """``cls`` with every parameter SAMPLES names, and those arguments; a required parameter it does not name
    fails, saying which."""
    kwargs: dict[str, Any] = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in SAMPLES:
            kwargs[name] = SAMPLES[name]
        elif param.default is param.empty:
            pytest.fail(f"{cls.__module__}.{cls.__qualname__} requires {name!r}: add a sample value for it to SAMPLES")
    return cls(**kwargs), kwargs


def via_execution_api(classpath: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A task's deferral: the worker's serde (task_runner._defer_task), JSON in the trigger row (the execution
    API's TIDeferredStatePayload route), the triggerer's decryption."""
    from airflow.models.trigger import Trigger
    from airflow.sdk.serde import serialize

    return Trigger._decrypt_kwargs(json.dumps(serialize(kwargs)))


def via_trigger_row(classpath: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``Trigger.from_object`` (asset watchers, the scheduler): serde, then Fernet, then back."""
    from airflow.models.trigger import Trigger

    row = Trigger(classpath=classpath, kwargs=kwargs)
    return row.kwargs


def rebuilt(classpath: str, stored: dict[str, Any]) -> BaseTrigger:
    """What the triggerer does with a stored trigger (TriggerRunner.create_triggers)."""
    from airflow._shared.module_loading import import_string
    from airflow.serialization.decoders import smart_decode_trigger_kwargs

    return import_string(classpath)(**{k: smart_decode_trigger_kwargs(v) for k, v in stored.items()})


def test_the_walk_finds_the_known_triggers() -> None:
    found = trigger_classes()
    assert found, "no trigger found in raylift.triggers"
    assert KNOWN <= set(found), f"missing: {sorted(KNOWN - set(found))}"


@pytest.mark.parametrize("store", [via_execution_api, via_trigger_row], ids=["deferral", "trigger_row"])
@pytest.mark.parametrize("classpath", sorted(trigger_classes()))
def test_round_trips_through_airflows_storage(
    classpath: str, store: Callable[[str, dict[str, Any]], dict[str, Any]]
) -> None:
    original, arguments = build(trigger_classes()[classpath])
    path, kwargs = original.serialize()
    assert path == classpath, "serialize() must name the class where the triggerer can import it"
    dropped = {name: value for name, value in arguments.items() if kwargs.get(name, object()) != value}
    assert not dropped, f"serialize() loses constructor arguments (the triggerer would use defaults): {dropped}"
    again = rebuilt(path, store(path, kwargs))
    assert type(again) is type(original)
    assert again.serialize() == (path, kwargs)
