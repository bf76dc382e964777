"""Write raylift's DAG files into an Airflow DAGs folder: ``python -m raylift.dags.install <folder>``.

Each file is two lines that import one of raylift's packaged DAGs (:data:`raylift.dags.DAG_MODULES`), so the DAGs
upgrade with the package and the DAGs folder never holds a stale copy. The DAG processor parses only files that
mention both "airflow" and "dag" (its safe mode), which the docstring does. ``--check`` compares instead of writing
(exit 1 naming the files that differ), for CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from raylift.dags import DAG_MODULES


def dag_file(dag_id: str) -> str:
    """The DAG file for ``dag_id``: an import of its packaged DAG."""
    module = DAG_MODULES[dag_id]
    return (
        f'"""Airflow DAG file for {dag_id}: the DAG ships in the raylift package ({module})."""\n\n'
        f"from {module} import dag  # noqa: F401  (the DAG processor keeps this file's top-level DAG)\n"
    )


def wanted(folder: Path) -> dict[Path, str]:
    return {folder / f"{dag_id}.py": dag_file(dag_id) for dag_id in DAG_MODULES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raylift.dags.install", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the Airflow DAGs folder ([core] dags_folder)")
    parser.add_argument("--check", action="store_true", help="compare, do not write; exit 1 if any file differs")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder: give the Airflow DAGs folder ([core] dags_folder)")
    stale = [path for path, text in wanted(args.folder).items()
             if not path.is_file() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"differs from raylift's DAG file: {path}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in wanted(args.folder).items():
        path.write_text(text)
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
