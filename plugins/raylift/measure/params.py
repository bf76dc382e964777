"""The benchmark's Params as Airflow hands them over: numbers and JSON objects, checked before any request.

Why a module of their own: a templated Param renders to text (``"0.1"``, ``"true"``, ``'{"prices": ...}'``), and
a malformed one must fail the step before anything is measured, in words that name the Param. The release gate
resolves its numbers the same way.
"""

from __future__ import annotations

import json
from typing import Any

from raylift.errors import RayliftValueError


def number(value: Any, default: float) -> float:
    """A number Param: ``default`` when unset (None or empty text), else its value as a float."""
    return default if value in (None, "") else float(value)


def json_param(raw: Any, name: str) -> dict[str, Any]:
    """An object Param: a dict, or its JSON text when templates render to strings."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            raise RayliftValueError(f"{name} {raw!r} is not a JSON object: {exc}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RayliftValueError(f"{name} must be an object, got {raw!r}")
    return raw


def cost_options(raw: Any) -> dict[str, Any]:
    """The cost Param, checked: an object with ``region`` and/or ``prices`` (instance type -> USD per hour)."""
    raw = json_param(raw, "cost")
    if not isinstance(raw, dict) or set(raw) - {"region", "prices"}:
        raise RayliftValueError(f"cost {raw!r}: give an object with 'region' and/or 'prices' "
                                "(instance type -> USD per hour), e.g. {\"prices\": {\"local\": 0.5}}")
    return raw
