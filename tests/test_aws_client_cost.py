"""tests/harness/aws_client_cost.py changes what the AWS stack costs in the test process, never what it answers."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tests.harness import aws_client_cost

base_aws = pytest.importorskip("airflow.providers.amazon.aws.hooks.base_aws")
loaders = pytest.importorskip("botocore.loaders")


class ScaleOperator:
    """An operator-shaped caller: the provider names the class whose ``execute`` is on the stack."""

    def execute(self) -> tuple[str | None, str | None]:
        return self.deep(5)

    def deep(self, n: int) -> tuple[str | None, str | None]:
        if n:
            return self.deep(n - 1)
        return (base_aws.AwsBaseHook._find_operator_class_name("execute"),
                base_aws.AwsBaseHook._find_operator_class_name("poke"))


def test_the_providers_caller_lookup_names_the_same_class_with_the_cheap_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base_aws, "inspect", inspect)
    real = ScaleOperator().execute()
    monkeypatch.setattr(base_aws, "inspect", aws_client_cost._InspectForCaller(inspect))
    cheap = ScaleOperator().execute()
    assert real == cheap == ("ScaleOperator", None)


def test_the_cheap_stack_lists_the_frames_inspect_lists() -> None:
    def where() -> tuple[list[str], list[str]]:
        return ([f.function for f in inspect.stack(context=0)][1:],
                [f.function for f in aws_client_cost._InspectForCaller(inspect).stack()])

    real, cheap = where()
    assert cheap[0] == "where" and real == cheap[1:]


def test_a_shared_service_model_is_the_one_a_fresh_loader_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh: Any = loaders.Loader().load_service_model("s3", "service-2")
    store: dict[tuple[Any, ...], Any] = {}
    shared = aws_client_cost._shared(loaders.Loader.load_service_model, store)
    first, second = shared(loaders.Loader(), "s3", "service-2"), shared(loaders.Loader(), "s3", "service-2")
    assert first is second and first == fresh
    other = loaders.Loader(extra_search_paths=["/nonexistent"])
    assert shared(other, "s3", "service-2") is not first  # other search paths: their own entry
