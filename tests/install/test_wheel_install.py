"""The built raylift package, installed as each platform installs it, judged by that platform's own Airflow.

For each platform of :data:`tests.install.envs.PLATFORMS` (Airflow 3.1, 3.2 and 3.3; MWAA's constraints where MWAA
runs it): the wheel installs with its declared dependencies and nothing else asked for, without Ray; every module
imports; the packaged DAGs, written into a DAGs folder by ``python -m raylift.dags.install``, parse in Airflow's
own DagBag with no import error; Airflow's CLI lists the provider, its hooks, triggers and extra link; and the
``raylift_cluster`` connection form has its fields as the UI gets them (``HookMetaService``, what the api-server's
``/ui/connections/hook_meta`` returns). On the oldest, ``tests/integration/test_installed_wheel.py`` deploys.
"""

from __future__ import annotations

import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from raylift.dags import DAG_MODULES
from raylift.provider import CLUSTER_CONN_FIELDS, HOOKS, OPERATORS, SENSORS, TRIGGERS
from tests.install.envs import (
    DATA,
    PLATFORMS,
    Dist,
    Env,
    build_dist,
    dry_run,
    parse_dags,
    platform_env,
    run,
    uv,
)

pytestmark = [pytest.mark.system, pytest.mark.timeout(1800)]


@pytest.fixture(scope="session")
def dist() -> Dist:
    return build_dist()


@pytest.fixture(scope="module", params=sorted(PLATFORMS))
def env(request: pytest.FixtureRequest, dist: Dist) -> Env:
    return platform_env(request.param, dist)


def test_sdist_and_wheel_are_publishable(dist: Dist, tmp_path: Path) -> None:
    """``twine check`` passes both; the sdist alone builds the same wheel (it carries what the wheel ships)."""
    from tests.install.envs import CONTROL_PYTHON

    run([CONTROL_PYTHON, "-m", "twine", "check", "--strict", dist.sdist, dist.wheel])
    with zipfile.ZipFile(dist.wheel) as zf:
        names = set(zf.namelist())
    for dag_id, module in DAG_MODULES.items():
        assert module.replace(".", "/") + ".py" in names, f"{dag_id}'s DAG is not in the wheel"
    assert "raylift/_project/serve_apps/llm/app.py" in names or any(
        n.startswith("raylift/_project/serve_apps/") for n in names), "the serve apps are not in the wheel"
    assert "raylift/_project/requirements/runtime.lock" in names
    with tarfile.open(dist.sdist) as tf:
        members = tf.getnames()
    assert any(m.endswith("/serve_apps") or "/serve_apps/" in m for m in members), "the sdist lacks serve_apps/"
    assert any(m.endswith("/CHANGELOG.md") for m in members), "the sdist lacks the changelog"


def test_wheel_declares_no_ray_and_no_upper_airflow_cap(dist: Dist) -> None:
    from tests.install.envs import wheel_requirements

    reqs = wheel_requirements(dist.wheel)
    assert not [r for r in reqs if r.split()[0].split(">")[0].split("=")[0] in ("ray", "ray[serve]")], reqs
    airflow = [r for r in reqs if r.startswith("apache-airflow") and not r.startswith("apache-airflow-providers")]
    assert airflow and all("<" not in r for r in airflow), airflow


@pytest.mark.parametrize("version", ["3.2.1", "3.3.1"])
def test_pip_dry_run_under_mwaa_constraints(dist: Dist, version: str, tmp_path: Path) -> None:
    """What MWAA runs: ``pip install -r requirements.txt -c <its constraints>`` where requirements.txt is raylift
    alone; pip (not uv) resolves it, into a Python 3.12 venv that has none of it yet."""
    from tests.install.envs import python

    venv = tmp_path / "venv"
    run([uv(), "venv", "-q", "--seed", "--python", python("3.12"), venv])
    chosen = dry_run(venv / "bin" / "python", [str(dist.wheel)], tmp_path, f"apache-airflow=={version}",
                     "-c", DATA / f"mwaa-{version}-constraints.txt", "-c", DATA / f"mwaa-{version}-essential.txt")
    assert chosen.get("raylift"), chosen
    assert chosen["apache-airflow"] == version
    assert "ray" not in chosen, f"raylift pulled Ray {chosen.get('ray')} into MWAA {version}"


def test_installed_without_ray_and_consistent(env: Env) -> None:
    run([uv(), "pip", "check", "--python", env.python])
    probe = ("import importlib.util, importlib.metadata as m, json; print(json.dumps({'ray': "
             "importlib.util.find_spec('ray') is not None, 'airflow': m.version('apache-airflow'), "
             "'raylift': m.version('raylift'), 'at': __import__('raylift').__file__}))")
    seen = json.loads(run([env.python, "-c", probe]).stdout)
    assert seen["ray"] is False
    assert seen["airflow"] == env.platform.airflow
    assert "site-packages" in seen["at"], f"raylift imported from {seen['at']}, not the installed wheel"


def test_every_module_imports(env: Env, tmp_path: Path) -> None:
    code = """
import importlib, json, pkgutil, raylift
failed = {}
names = [m.name for m in pkgutil.walk_packages(raylift.__path__, "raylift.")]
for name in names:
    if name.startswith("raylift._project"):
        continue  # the Serve apps and their lock, shipped as data for the cluster's Python
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"n": len(names), "failed": failed}))
"""
    out = json.loads(run([env.python, "-c", code], env=env.env(tmp_path)).stdout.splitlines()[-1])
    assert out["n"] > 100
    assert out["failed"] == {}


def test_packaged_dags_parse(env: Env, tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    run([env.prefix / "bin" / "raylift-install-dags", dags])
    out = parse_dags(env.python, dags, env.env(tmp_path))
    assert out["errors"] == {}
    assert out["dag_ids"] == sorted(DAG_MODULES)
    assert all(str(f).startswith(str(dags)) for f in out["files"]), out["files"]
    run([env.prefix / "bin" / "raylift-install-dags", "--check", dags])


def _cli(env: Env, home: Path, *args: str) -> list[dict]:
    out = run([env.airflow, *args, "-o", "json"], env=env.env(home)).stdout
    return json.loads(out[out.index("["):])


def test_airflow_lists_the_provider(env: Env, tmp_path: Path) -> None:
    assert any(p["Provider"] == "raylift" if "Provider" in p else p.get("package_name") == "raylift"
               for p in _cli(env, tmp_path, "providers", "list"))
    hooks = [h for h in _cli(env, tmp_path, "providers", "hooks") if h.get("package_name") == "raylift"]
    assert [h["connection_type"] for h in hooks] == ["raylift_cluster"]
    triggers = {t["class"] for t in _cli(env, tmp_path, "providers", "triggers") if t.get("package_name") == "raylift"}
    assert triggers == {f"raylift.triggers.{m}" for m in TRIGGERS}
    links = {x["extra_link_class_name"] for x in _cli(env, tmp_path, "providers", "links")}
    assert "raylift.operators.benchmark.BenchmarkReportLink" in links
    info = run([env.python, "-c", "import json; from airflow.providers_manager import ProvidersManager as P; "
                "p = P().providers['raylift']; print(json.dumps(p.data))"], env=env.env(tmp_path)).stdout
    data = json.loads(info.splitlines()[-1])
    for kind, modules in (("hooks", HOOKS), ("operators", OPERATORS), ("sensors", SENSORS)):
        listed = {m for group in data[kind] for m in group["python-modules"]}
        assert listed == {f"raylift.{kind}.{m}" for m in modules}, kind


def test_connection_form_has_the_fields(env: Env, tmp_path: Path) -> None:
    """What the UI's connection form gets on this Airflow: on 3.1 from the hook's widgets, from 3.2 on from the
    provider info's ``conn-fields`` (HookMetaService is the api-server's own code for both)."""
    code = """
import json
from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService
for h in HookMetaService.hook_meta_data():
    if h.connection_type == "raylift_cluster":
        d = h.model_dump()
        print(json.dumps({"extra": sorted(d.get("extra_fields") or {}), "standard": d.get("standard_fields")}))
"""
    lines = run([env.python, "-c", code], env=env.env(tmp_path)).stdout.splitlines()
    form = json.loads(lines[-1])
    assert form["extra"] == sorted(CLUSTER_CONN_FIELDS)
    assert form["standard"]["host"]["hidden"] is True
    assert form["standard"]["password"]["title"] == "Ray auth token"
