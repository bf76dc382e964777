"""Every operator and sensor documents each argument it takes, in the ``:param name:`` form Airflow's docs use."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from airflow.models.baseoperator import BaseOperator

import raylift.operators
import raylift.sensors


def raylift_operators() -> list[type[BaseOperator]]:
    found: dict[str, type[BaseOperator]] = {}
    for package in (raylift.operators, raylift.sensors):
        for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
            module = importlib.import_module(info.name)
            for _, cls in inspect.getmembers(module, inspect.isclass):
                if issubclass(cls, BaseOperator) and cls.__module__ == module.__name__:
                    found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return [found[name] for name in sorted(found)]


def own_params(cls: type) -> list[str]:
    """The keyword arguments ``cls.__init__`` itself declares (``**kwargs`` go to the base class)."""
    if "__init__" not in vars(cls):
        return []
    signature = inspect.signature(vars(cls)["__init__"])
    return [p.name for p in signature.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]  # fmt: skip


def test_the_operators_are_found() -> None:
    names = {cls.__name__ for cls in raylift_operators()}
    assert {"BenchmarkOperator", "ServeDeployOperator", "RayClusterReadySensor", "TargetOperator"} <= names


@pytest.mark.parametrize("cls", raylift_operators(), ids=lambda cls: cls.__name__)
def test_every_argument_is_documented(cls: type) -> None:
    doc = inspect.getdoc(cls) or ""
    assert doc, f"{cls.__name__} has no class docstring"
    missing = [name for name in own_params(cls) if f":param {name}:" not in doc]
    assert not missing, f"{cls.__name__}'s docstring lacks ':param {missing[0]}:' (and {len(missing) - 1} more)"
