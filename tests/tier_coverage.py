"""Which modules of plugins/raylift/ no unit test imports: ``python -m tests.tier_coverage <unit run's JUnit XML>...``.

The unit tier (tests/tier_guard.py) is what ``make test-fast`` runs, so a module no unit test imports is checked
only by the slower tiers. A module counts as covered when a test module with a unit test in that run imports it,
directly or through the test helpers it imports (tests.*, bench.*; raylift's own imports are not followed: a module
reached only through another is not what a test is about). Modules that do their work through a process, a server or
a network client have no unit test by nature: ``PROCESS_MODULES`` lists them, each with why; ``KNOWN_GAPS`` lists
those that need no process but have no unit test yet (reported each run). Any other uncovered module fails the check
(exit 1): give it a unit test, or list it with the reason.
"""

from __future__ import annotations

import ast
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "plugins"

# Modules whose work is a process, a server or a network client: no unit test can reach them without one.
PROCESS_MODULES: dict[str, str] = {
    "raylift.hooks.autoscaling_group": "AWS Auto Scaling API (moto)",
    "raylift.hooks.ecr": "AWS ECR API (moto)",
    "raylift.hooks.service_discovery": "AWS Cloud Map API (moto)",
    "raylift.hooks.kuberay_workers": "the Kubernetes API (its stand-in on 127.0.0.1)",
    "raylift.hooks.ray_drain": "Ray's dashboard and a real Ray (tests/hooks/test_ray_drain.py)",
    "raylift.hooks.ray_replica_logs": "Ray's dashboard over HTTP",
    "raylift.kuberay.drain": "a script run by Ray in a pod (checked in the runtime venv's Python)",
    "raylift.triggers.ray_job": "polls Ray's dashboard over HTTP",
    "raylift.serve.ray_schema_check": "a script run by the runtime venv's Python",
    "raylift.measure.__main__": "a command line that measures a live endpoint",
    "raylift.operators.approval": "an operator against a Serve endpoint (the stub server)",
    "raylift.plugin": "the Airflow plugin, loaded by Airflow's api-server (a child Python)",
    "raylift.local.launcher": "a script a child Python runs to start the engine-args check and the local Ray nodes "
                              "(raylift.local.isolated; tests/targets/test_check_subprocess_env.py)",
}

# Modules that need no process but no unit test imports yet: reported on every run, not failed; a module that leaves
# this list by getting a unit test is said to be stale here. Give them unit tests (pure functions, no stand-in).
KNOWN_GAPS: dict[str, str] = {
    "raylift.measure.params": "the benchmark's Params parsing: pure; tested only through operators",
    "raylift.reports_app": "FastAPI's TestClient would test it in-process; today served on 127.0.0.1",
    "raylift.demo_summary": "reads a run record; tested only beside a dashboard stand-in",
    "raylift.dags.deploy": "parsed in a child Python (tests/dags)",
    "raylift.dags.stage_model": "parsed in a child Python (tests/dags)",
    "raylift.dags.teardown": "parsed in a child Python (tests/dags)",
    "raylift.dags.undeploy": "parsed in a child Python (tests/dags)",
}


def raylift_modules() -> list[str]:
    names = []
    for path in sorted((PACKAGE / "raylift").rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _file_of(module: str) -> Path | None:
    top = module.split(".", 1)[0]
    base = PACKAGE if top == "raylift" else ROOT
    path = base.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported(path: Path, module_level: bool = False) -> set[str]:
    """Every module an ``import`` / ``from ... import`` in the file names (anywhere, or only those run when the
    module is imported: outside functions); a name imported from a package that is a module counts as it."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    nodes = _module_level(tree) if module_level else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names
                         if _file_of(f"{node.module}.{alias.name}"))
    return found


def _module_level(tree: ast.AST) -> list[ast.AST]:
    """The nodes run on import: everything but function bodies (and ``if TYPE_CHECKING:`` blocks)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            todo.append(child)
    return out


def covered_by(test_modules: set[str]) -> set[str]:
    """raylift modules the given test modules import, directly or through tests.* / bench.* helpers."""
    covered: set[str] = set()
    seen: set[str] = set()
    todo = list(test_modules)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _file_of(module)
        if path is None:
            continue
        in_raylift = module.split(".", 1)[0] == "raylift"
        for name in imported(path, module_level=in_raylift):
            parts = name.split(".")
            if parts[0] == "raylift":
                for i in range(1, len(parts) + 1):  # its packages run too
                    covered.add(".".join(parts[:i]))
                    todo.append(".".join(parts[:i]))
            elif parts[0] in ("tests", "bench"):
                todo.append(name)
    return covered


def unit_test_modules(junit: Path) -> set[str]:
    """Dotted test modules with at least one test that ran (passed, failed or skipped) in that JUnit file."""
    modules: set[str] = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        classname = case.get("classname", "")
        parts = classname.split(".")
        while parts and _file_of(".".join(parts)) is None:  # drop test classes
            parts.pop()
        if parts:
            modules.add(".".join(parts))
    return modules


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    tests = set().union(*(unit_test_modules(Path(arg)) for arg in argv))
    covered = covered_by(tests)
    everything = raylift_modules()
    uncovered = [m for m in everything if m not in covered]
    by_process = [m for m in uncovered if m in PROCESS_MODULES]
    known = [m for m in uncovered if m in KNOWN_GAPS]
    gaps = [m for m in uncovered if m not in PROCESS_MODULES and m not in KNOWN_GAPS]
    stale = sorted(m for m in {**PROCESS_MODULES, **KNOWN_GAPS} if m in covered or m not in everything)
    print(f"unit tier: {len(tests)} test modules import {len(everything) - len(uncovered)} of the "
          f"{len(everything)} modules of plugins/raylift; {len(by_process)} work through a process "
          f"(PROCESS_MODULES); {len(known)} known gaps (KNOWN_GAPS in tests/tier_coverage.py):")
    for module in known:
        print(f"  {module}: {KNOWN_GAPS[module]}")
    if stale:
        print("listed in tests/tier_coverage.py but imported by a unit test now, or gone (remove them): "
              + ", ".join(stale))
    if gaps:
        print(f"{len(gaps)} new modules of plugins/raylift no unit test imports (add a unit test, or list the module "
              f"in PROCESS_MODULES in tests/tier_coverage.py with why it needs a process):")
        for module in gaps:
            print(f"  {module}")
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
