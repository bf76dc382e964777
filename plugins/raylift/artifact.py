"""Content-addressed serve-app packages: the local analogue of an image tag.

The digest covers every file under ``serve_apps/`` plus the runtime lock file, so an unchanged tree
maps to the same package (reused, not rebuilt) and any change yields a new one. The zip is
deterministic (sorted entries, fixed timestamps) and has the single top-level folder Ray's
``runtime_env.working_dir`` expects of a zip URI.
"""

from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path

from raylift.config import PROJECT_FILES, project_root_problem
from raylift.errors import BuildError

IGNORED_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache"}
FIXED_TIME = (2020, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class PackageInputs:
    """What goes into a package: the app folder and the files that pin its runtime."""

    app_dir: Path
    extra_files: tuple[Path, ...] = ()

    def files(self) -> list[tuple[str, Path]]:
        if not self.app_dir.is_dir():
            raise BuildError(f"Serve app folder {self.app_dir} does not exist. {_root_hint()}")
        entries = [
            (p.relative_to(self.app_dir).as_posix(), p)
            for p in self.app_dir.rglob("*")
            if p.is_file() and not IGNORED_PARTS.intersection(p.parts) and p.suffix != ".pyc"
        ]
        for extra in self.extra_files:
            if not extra.is_file():
                raise BuildError(f"Package input {extra} is missing. {_root_hint()}")
            entries.append((f"_raylift/{extra.name}", extra))
        return sorted(entries)


def _root_hint() -> str:
    """What the project root lacks and what to set (raylift.config), when a missing input came from it."""
    return project_root_problem() or f"(raylift's project root has {' and '.join(PROJECT_FILES)}; this input was not from it.)"


def digest_of(inputs: PackageInputs) -> str:
    """sha256 over (relative path, bytes) of every input, in sorted order."""
    h = hashlib.sha256()
    for rel, path in inputs.files():
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def build_package(inputs: PackageInputs, out_dir: Path, *, force: bool = False) -> tuple[Path, str, bool]:
    """Write ``serve_apps-<digest12>.zip`` into ``out_dir``; returns (path, digest, reused)."""
    digest = digest_of(inputs)
    name = f"serve_apps-{digest[:12]}"
    path = out_dir / f"{name}.zip"
    if path.exists() and not force:
        return path, digest, True
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel, src in inputs.files():
            info = zipfile.ZipInfo(f"{name}/{rel}", date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, src.read_bytes())
    tmp.replace(path)
    return path, digest, False
