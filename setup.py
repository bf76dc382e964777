"""Ship the project files raylift reads at run time inside its wheel.

raylift builds its Serve-app package from ``serve_apps/`` plus ``requirements/runtime.lock`` (``raylift.artifact``),
both at the project root, outside the ``plugins/raylift`` package. A non-editable install (``pip install ./``, as
``images/airflow/Dockerfile`` does) would leave them behind, so the build copies them into the package as
``raylift/_project/`` (the same relative paths), where ``raylift.config.repo_root`` finds them. Everything else
about the package is declared in pyproject.toml. An editable install reads them from the checkout instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup  # type: ignore[import-untyped]  # no stubs in the control env
from setuptools.command.build_py import build_py  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent
# Keep in step with raylift.config.SHIPPED_PROJECT_DIR and PROJECT_FILES.
SHIPPED = ("serve_apps", "requirements/runtime.lock")
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", ".mypy_cache")


class BuildPyWithProjectFiles(build_py):  # type: ignore[misc]
    """``build_py``, then ``serve_apps/`` and ``requirements/runtime.lock`` copied into ``raylift/_project/``."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # an editable raylift runs from the checkout, which has them
        missing = [name for name in SHIPPED if not (ROOT / name).exists()]
        if missing:
            raise SystemExit(
                f"raylift's wheel needs {', '.join(missing)} from the project root {ROOT} (a Docker build must COPY "
                "them beside pyproject.toml and plugins/raylift)."
            )
        target = Path(self.build_lib) / "raylift" / "_project"
        shutil.rmtree(target, ignore_errors=True)
        for name in SHIPPED:
            source, dest = ROOT / name, target / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, dest, ignore=SKIPPED)
            else:
                shutil.copy2(source, dest)


setup(cmdclass={"build_py": BuildPyWithProjectFiles})
