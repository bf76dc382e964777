"""Typed ``target_options``: one pydantic model per target, one spelling per key.

Why: the DAG's ``target_options`` is a free JSON object, and a typo, a wrong type or another tool's name for a
key would otherwise surface mid-deploy (or be dropped silently). Each target validates its options here, at
construction, before anything is touched: unknown keys are refused with the allowed ones listed, a value of the
wrong type or range names the key, what was given and what is expected, and a name raylift used to accept
from the terraform stacks names the one to use instead (``tools/tf_outputs_to_airflow.py`` prints raylift's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from raylift.errors import RayliftValueError


class TargetOptions(BaseModel):
    """Base of every target's options. Strict (JSON types: ``"8265"`` is not a port, ``true`` not a count),
    frozen (a target's options do not change under it) and closed (``extra="forbid"``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    TARGET: ClassVar[str] = ""
    # a spelling raylift no longer takes -> the option(s) to use instead
    RENAMED: ClassVar[dict[str, tuple[str, ...]]] = {}
    # appended to the unknown-keys message
    HINT: ClassVar[str] = ""

    @classmethod
    def allowed(cls) -> list[str]:
        """The option names, required ones first (what a user must set), then the rest sorted."""
        fields = cls.model_fields
        return sorted(fields, key=lambda name: (not fields[name].is_required(), name))

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> Self:
        """The validated options, or one RayliftValueError naming every problem (nothing else is touched)."""
        renamed = [key for key in options if key in cls.RENAMED]
        if renamed:
            raise RayliftValueError(" ".join(renamed_message(key, cls.RENAMED[key]) for key in renamed))
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            raise RayliftValueError(cls.describe(exc)) from None

    @classmethod
    def describe(cls, exc: ValidationError) -> str:
        """pydantic's errors as one message in raylift's words: key, value given, what is expected."""
        unknown: list[str] = []
        messages: list[str] = []
        for error in exc.errors(include_url=False):
            key = ".".join(str(part) for part in error["loc"])
            kind = error["type"]
            if kind == "extra_forbidden":
                unknown.append(key)
            elif kind == "missing":
                field = cls.model_fields.get(key)
                what = f", {field.description}" if field is not None and field.description else ""
                messages.append(f"target {cls.TARGET!r} needs target_options.{key}{what}.")
            elif kind == "value_error":  # our validators: their message already names the key and value
                messages.append(str(error.get("ctx", {}).get("error", error["msg"])))
            else:
                given = error.get("input")
                messages.append(
                    f"target option {key!r} got {given!r} ({type(given).__name__}): "
                    f"{error['msg'][0].lower()}{error['msg'][1:]}."
                )
        if unknown:
            hint = f" {cls.HINT}" if cls.HINT else ""
            messages.insert(
                0,
                f"target_options {sorted(unknown)} are not options of the {cls.TARGET} target: use "
                f"{', '.join(cls.allowed())}{hint}.",
            )
        return " ".join(messages)


def renamed_message(key: str, use: tuple[str, ...]) -> str:
    """What to say when ``key`` is a spelling raylift does not take."""
    names = " and ".join(repr(name) for name in use)
    return (
        f"target option {key!r} is not raylift's spelling: use {names} "
        "(tools/tf_outputs_to_airflow.py prints raylift's names from the terraform outputs)."
    )
