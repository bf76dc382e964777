"""Two per-client costs of the AWS stack, paid once per test process instead of once per boto3 client.

The component tier builds hundreds of boto3 clients through the Amazon provider's hooks (each task of a test makes its
own target and hooks, as each Airflow task does), and two costs of each build are pure functions of static inputs:

- botocore parses each service model (``service-2.json``, ``endpoints.json``, waiters, paginators) again for every
  new session: ``Loader`` caches per instance only (``botocore/loaders.py``: ``instance_cache``). Shared here across
  loaders with the same search paths, as one loader already shares it among all of its own clients.
- ``AwsBaseHook._get_caller`` (the ``Caller/`` field of the provider's user agent) walks ``inspect.stack()``, which
  reads a source line for each frame; pytest's stacks are 80+ frames deep. The walk's own data (each frame and its
  function name, the only fields ``_find_operator_class_name`` and ``_find_executor_class_name`` read) comes from
  the frames directly, so the result is the same without the source lines.

Measured (bench/README.md, "suite"): tests/aws/test_eks_blue_green.py and three other AWS files, 40 tests. Only the
pytest process is touched: the system tier's Airflow, Ray and vLLM processes run the libraries as shipped.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

_CACHED = ("load_service_model", "load_data_with_path", "list_available_services", "determine_latest_version")


class _FrameInfo(NamedTuple):
    """The two fields of ``inspect.FrameInfo`` that the provider's caller lookup reads: ``[0]`` and ``.function``."""

    frame: Any
    function: str


def _stack() -> list[_FrameInfo]:
    """``inspect.stack()`` without source context: the caller's frame outwards, as ``inspect.stack`` orders them."""
    frame = sys._getframe(1)
    out = []
    while frame is not None:
        out.append(_FrameInfo(frame, frame.f_code.co_name))
        frame = frame.f_back
    return out


class _InspectForCaller:
    """What ``base_aws`` uses of ``inspect``, with ``stack`` cheap; everything else is the real module's."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    @staticmethod
    def stack(context: int = 1) -> list[_FrameInfo]:
        return _stack()[1:]


def _shared(method: Callable[..., Any], store: dict[tuple[Any, ...], Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = (method.__name__, tuple(self.search_paths), args, tuple(sorted(kwargs.items())))
        if key not in store:
            store[key] = method(self, *args, **kwargs)
        return store[key]

    wrapper._raylift_shared = True  # type: ignore[attr-defined]
    return wrapper


def install() -> None:
    """Idempotent; a no-op where botocore or the Amazon provider is missing."""
    try:
        from botocore import loaders
    except ImportError:
        return
    if not getattr(loaders.Loader.load_service_model, "_raylift_shared", False):
        store: dict[tuple[Any, ...], Any] = {}
        for name in _CACHED:
            setattr(loaders.Loader, name, _shared(getattr(loaders.Loader, name), store))
    try:
        from airflow.providers.amazon.aws.hooks import base_aws
    except ImportError:
        return
    if not isinstance(base_aws.inspect, _InspectForCaller):
        base_aws.inspect = _InspectForCaller(base_aws.inspect)  # type: ignore[assignment]
