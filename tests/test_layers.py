"""The import-linter contract in pyproject.toml holds for the package, and breaks when a layer is crossed.

The second test copies the package, adds one upward import (hooks -> targets, the cycle the records module
removed) and expects import-linter to report that contract broken: a contract that cannot fail checks nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(plugins: Path, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(config), "--no-cache"],
        env={**os.environ, "PYTHONPATH": str(plugins)}, cwd=config.parent, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_the_package_keeps_its_layers() -> None:
    out = lint_imports(REPO / "plugins", REPO / "pyproject.toml")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "raylift layers KEPT" in out.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    shutil.copytree(REPO / "plugins" / "raylift", plugins / "raylift", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    with (plugins / "raylift" / "hooks" / "ecr.py").open("a") as fh:
        fh.write("\nfrom raylift.targets import TARGETS  # an upward import: hooks -> targets\n")
    out = lint_imports(plugins, tmp_path / "pyproject.toml")
    assert out.returncode != 0
    assert "raylift layers BROKEN" in out.stdout
    assert "raylift.hooks is not allowed to import raylift.targets" in out.stdout


def test_tests_never_import_bench() -> None:
    """The harness the tests and the benchmarks share lives under tests/ (tests/harness); bench/ imports it, never the
    reverse, so a measurement script can change without touching what the suite asserts."""
    import ast

    root = Path(__file__).resolve().parent
    offenders = []
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            offenders += [f"{path.relative_to(root)}: {n}" for n in names if n == "bench" or n.startswith("bench.")]
    assert offenders == []
