"""The package's own metadata, at the unit tier: the DAG files it writes, its provider info, the Airflow bridge and the
report without its optional plots. tests/install judges the built wheel inside each platform's Airflow."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

import raylift
from raylift import compat
from raylift.dags import DAG_MODULES
from raylift.dags.install import dag_file, main
from raylift.provider import HOOKS, OPERATORS, SENSORS, TRIGGERS, get_provider_info

ROOT = Path(__file__).resolve().parents[1]


def test_the_repository_dags_folder_is_what_the_installer_writes() -> None:
    assert main([str(ROOT / "dags"), "--check"]) == 0
    assert sorted(p.stem for p in (ROOT / "dags").glob("*.py")) == sorted(DAG_MODULES)


def test_the_installer_writes_each_dag_file_and_refuses_a_missing_folder(tmp_path: Path) -> None:
    assert main([str(tmp_path), "--check"]) == 1  # nothing there yet
    assert main([str(tmp_path)]) == 0
    for dag_id in DAG_MODULES:
        text = (tmp_path / f"{dag_id}.py").read_text()
        assert text == dag_file(dag_id)
        assert "airflow" in text.lower() and "dag" in text.lower()  # the DAG processor's safe-mode test
    with pytest.raises(SystemExit):
        main([str(tmp_path / "nope")])


@pytest.mark.parametrize(("kind", "listed"), [("operators", OPERATORS), ("hooks", HOOKS), ("triggers", TRIGGERS),
                                              ("sensors", SENSORS)])
def test_provider_info_lists_every_module(kind: str, listed: dict[str, str]) -> None:
    folder = Path(raylift.__file__).parent / kind
    assert {m.name for m in pkgutil.iter_modules([str(folder)])} == set(listed)
    info = get_provider_info()
    modules = {m for group in info[kind] for m in group["python-modules"]}
    assert modules == {f"raylift.{kind}.{m}" for m in listed}
    names = {i["integration-name"] for i in info["integrations"]}
    assert {group["integration-name"] for group in info[kind]} <= names
    assert info["versions"] == [raylift.__version__]


def test_the_3_1_form_and_the_declarative_one_say_the_same() -> None:
    from raylift.hooks.raylift_cluster import RayliftClusterHook
    from raylift.provider import UI_FIELD_BEHAVIOUR

    behaviour = RayliftClusterHook.get_ui_field_behaviour()
    assert behaviour == {"hidden_fields": UI_FIELD_BEHAVIOUR["hidden-fields"],
                         "relabeling": UI_FIELD_BEHAVIOUR["relabeling"],
                         "placeholders": UI_FIELD_BEHAVIOUR["placeholders"]}


@pytest.mark.parametrize(("text", "expected"), [("3.1.8", (3, 1)), ("3.2.0rc1", (3, 2)), ("3.10.0.dev0", (3, 10))])
def test_airflow_versions_are_read(text: str, expected: tuple[int, int]) -> None:
    assert compat.parse_version(text) == expected


def test_an_airflow_older_than_the_floor_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "3.0.6")
    compat.airflow_version.cache_clear()
    try:
        with pytest.raises(compat.UnsupportedAirflowError, match=r"needs Airflow 3\.1 or newer; .* has Airflow 3\.0\.6"):
            compat.airflow_version()
    finally:
        compat.airflow_version.cache_clear()


def test_a_waiter_out_of_attempts_is_told_apart_on_old_and_new_amazon_providers() -> None:
    from airflow.providers.common.compat.sdk import AirflowException

    assert compat.is_waiter_max_attempts(AirflowException("Waiter error: max attempts reached"))  # amazon < 9.35
    assert not compat.is_waiter_max_attempts(AirflowException("Service failed: FAILED"))


def test_the_report_says_how_to_get_plots_when_matplotlib_is_absent(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    from raylift.measure import report

    monkeypatch.setattr(report, "plots_available", lambda: False)
    result = {"model": "m", "endpoint": "http://127.0.0.1:1", "levels": [], "profile": {}}
    paths = report.write_report(result, tmp_path)
    assert not [k for k in paths if k.endswith("_png")]
    assert "raylift[plots]" in paths["html"].read_text()
