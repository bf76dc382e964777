"""Each Param's default is written once (``raylift.config.PARAM_DEFAULTS``) and is the same wherever it is read.

A default passes through the config, the DAG's Params (as Airflow's own DagBag parses them), the operators (their
signature defaults and what they fall back to when a Param arrives empty) and the README's Params table. Before this
table, ``on_inconclusive`` was ``pass`` in the config, the Params and the README but ``hold`` in the gate's fallback.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.dags.test_dagbag import parse

REPO = Path(__file__).resolve().parents[2]
DEPLOY = "raylift_deploy"
# Defaults that depend on the machine (the generated tiny model under RAYLIFT_HOME): the README says so in words
COMPUTED = {"model_source"}


@pytest.fixture(scope="module")
def parsed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return parse(tmp_path_factory)


def _plain(value: Any) -> Any:
    """JSON's view of a value (tuples are lists; a float that is an integer compares equal either way)."""
    return json.loads(json.dumps(value))


def _split_top(cell: str) -> list[str]:
    """A table cell split at the ', ' that separate its values (not inside backticks, brackets or parentheses)."""
    parts, depth, ticks, start = [], 0, False, 0
    for i, ch in enumerate(cell):
        if ch == "`":
            ticks = not ticks
        elif not ticks and ch in "([{":
            depth += 1
        elif not ticks and ch in ")]}":
            depth -= 1
        elif not ticks and depth == 0 and cell.startswith(", ", i):
            parts.append(cell[start:i])
            start = i + 2
    parts.append(cell[start:])
    return [p.strip() for p in parts]


def readme_defaults() -> dict[str, Any]:
    """The README's Params table as {param: default}; a default in words (a computed one) is kept as its text."""
    text = (REPO / "README.md").read_text()
    table = text[text.index("| Param | default | meaning |"):].split("\n\n", 1)[0].splitlines()[2:]
    found: dict[str, Any] = {}
    for row in table:
        names_cell, default_cell = (c.strip() for c in row.strip("|").split("|")[:2])
        names = re.findall(r"`([a-z_]+)`", names_cell)
        values = _split_top(default_cell)
        assert len(values) == len(names), f"README row {names}: {len(values)} defaults for {len(names)} Params"
        for name, value in zip(names, values, strict=True):
            value = re.sub(r"\s*\(.*\)$", "", value)  # "`{}` (off)": the remark is for the reader
            literal = value.strip("`")
            try:
                found[name] = json.loads(literal)
            except json.JSONDecodeError:
                found[name] = literal
    return found


def test_the_table_covers_every_param_of_the_deploy_dag(parsed: dict[str, Any]) -> None:
    from raylift.config import PARAM_DEFAULTS

    params = set(parsed["param_defaults"][DEPLOY])
    assert params - set(PARAM_DEFAULTS) == COMPUTED, "Params of raylift_deploy with no default in PARAM_DEFAULTS"
    assert set(PARAM_DEFAULTS) - params == set(), "PARAM_DEFAULTS names Params raylift_deploy does not have"


def test_every_dag_param_default_is_the_tables(parsed: dict[str, Any]) -> None:
    """raylift_deploy's Params, and each Param of the same name in the other DAGs (teardown, undeploy, redeploy)."""
    from raylift.config import PARAM_DEFAULTS
    from raylift.dag_params import default_model_source

    table = {**PARAM_DEFAULTS, "model_source": default_model_source()}
    differ = {f"{dag}.{name}": (value, table[name]) for dag, params in parsed["param_defaults"].items()
              for name, value in params.items() if name in table and _plain(value) != _plain(table[name])}
    assert differ == {}, "DAG Param default != raylift.config.PARAM_DEFAULTS (Param, table)"


def test_the_readme_table_shows_the_tables_defaults() -> None:
    from raylift.config import PARAM_DEFAULTS

    readme = readme_defaults()
    assert set(readme) - COMPUTED == set(PARAM_DEFAULTS) - COMPUTED, "README's Params table and PARAM_DEFAULTS differ"
    differ = {}
    for name, value in readme.items():
        if name in COMPUTED:
            continue
        want = _plain(PARAM_DEFAULTS[name])
        if isinstance(want, dict) and isinstance(value, dict):  # the README leaves out keys that default to null
            want = {k: v for k, v in want.items() if v is not None}
        if value != want:
            differ[name] = (value, want)
    assert differ == {}, "README default != PARAM_DEFAULTS (README, table)"


def test_the_operators_signature_defaults_are_the_tables(parsed: dict[str, Any]) -> None:
    """An operator argument named as a Param either has no default of its own (None: it reads the table when the
    Param arrives empty) or the table's."""
    from raylift.config import PARAM_DEFAULTS

    differ, seen = {}, 0
    for task, where in parsed["task_classes"][DEPLOY].items():
        module, _, qualname = where.partition(":")
        cls = getattr(importlib.import_module(module), qualname)
        for klass in cls.__mro__:
            if not klass.__module__.startswith("raylift."):
                continue
            for arg in inspect.signature(klass.__init__).parameters.values():
                if arg.name not in PARAM_DEFAULTS or arg.default in (inspect.Parameter.empty, None):
                    continue
                seen += 1
                if _plain(arg.default) != _plain(PARAM_DEFAULTS[arg.name]):
                    differ[f"{task} ({klass.__qualname__}).{arg.name}"] = (arg.default, PARAM_DEFAULTS[arg.name])
    assert seen >= 10, f"only {seen} operator defaults found: is the DAG's task list read?"
    assert differ == {}, "operator default != PARAM_DEFAULTS (operator, table)"


def test_the_gate_falls_back_to_the_tables_defaults() -> None:
    """The gate's settings when every Param reaches it empty (a DAG that does not pass them, a REST run with nulls)."""
    from raylift.config import PARAM_DEFAULTS
    from raylift.operators.gate import ReleaseGateOperator

    settings = ReleaseGateOperator(task_id="gate").settings()
    assert set(settings) <= set(PARAM_DEFAULTS)
    assert {k: _plain(v) for k, v in settings.items()} == {k: _plain(PARAM_DEFAULTS[k]) for k in settings}


def test_the_deploy_form_groups_every_param_in_its_section(parsed: dict[str, Any]) -> None:
    """Airflow's trigger form draws one accordion per ``section``; a Param without one falls into the default."""
    from raylift.dag_params import SECTIONS

    sections = parsed["param_sections"][DEPLOY]
    assert {name for name, section in sections.items() if section is None} == set()
    assert list(dict.fromkeys(sections.values())) == list(SECTIONS), "sections out of order in the form"
