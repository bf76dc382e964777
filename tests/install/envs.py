"""raylift as its users get it: the sdist and wheel built from a clean copy of this checkout, installed into a fresh
Airflow environment the way each platform installs it.

The platforms (:data:`PLATFORMS`):

- ``airflow-3.1.8``: the oldest Airflow raylift supports, latest patch on PyPI, on Python 3.11 (Cloud Composer 3's
  Airflow 3.1 images run 3.11). PyPI resolves everything, except that each Apache provider raylift requires is held
  at raylift's own floor (``floors.txt``, written from the wheel's metadata): the floors are what this tests; and
  ``data/airflow-3.1.8-pypi-fixes.txt`` holds back what breaks Airflow 3.1.8 itself (its file says why).
- ``airflow-3.2.2`` / ``airflow-3.3.2``: the latest 3.2 and 3.3 patches on PyPI, Python 3.12, PyPI's versions.
- ``mwaa-3.2.1`` / ``mwaa-3.3.1``: Amazon MWAA's Python 3.12 with the constraint files MWAA imposes on a
  ``requirements.txt`` install (copies in ``data/``, from aws/amazon-mwaa-docker-images
  ``images/airflow/<version>/etc/airflow_constraints.txt`` and ``mwaa_essential_constraints.txt``, snapshot of
  2026-08-20; the first is Apache Airflow's own constraints file for that version with MWAA's notes).

The newest Airflow (3.3.2) is also the suite's own control environment (there with raylift editable).

Builds are shared between the pytest processes of the suite's lanes (a file lock per build), and reused while the
checkout's files and the platform's inputs are unchanged (a hash in the folder's name).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).resolve().parent / "data"
WORK = Path(os.environ.get("RAYLIFT_INSTALL_WORK", ROOT / "var" / "install"))
CONTROL_PYTHON = Path(sys.executable)
PYENV = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"


def uv() -> Path:
    return Path(os.environ.get("RAYLIFT_CACHE", ROOT / ".cache")) / "uvtool" / "bin" / "uv"


def python(version: str) -> Path:
    """An interpreter of ``version`` (``3.12``): the control env's own when it matches, else pyenv's, else PATH's."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return Path(sys.base_prefix) / "bin" / f"python{version}"
    found = sorted(PYENV.glob(f"{version}.*/bin/python{version}"))
    if found:
        return found[-1]
    on_path = shutil.which(f"python{version}")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(f"no Python {version} here (pyenv's {PYENV} or PATH): install it to run this platform")


@dataclass(frozen=True)
class Platform:
    name: str
    python: str
    airflow: str
    constraints: tuple[str, ...] = ()  # files in DATA
    floors: bool = False  # hold raylift's required Apache providers at their floors


PLATFORMS = {
    p.name: p
    for p in (
        Platform("airflow-3.1.8", "3.11", "3.1.8", ("airflow-3.1.8-pypi-fixes.txt",), floors=True),
        Platform("airflow-3.2.2", "3.12", "3.2.2"),
        Platform("airflow-3.3.2", "3.12", "3.3.2"),
        Platform("mwaa-3.2.1", "3.12", "3.2.1", ("mwaa-3.2.1-constraints.txt", "mwaa-3.2.1-essential.txt")),
        Platform("mwaa-3.3.1", "3.12", "3.3.1", ("mwaa-3.3.1-constraints.txt", "mwaa-3.3.1-essential.txt")),
    )
}
OLDEST = "airflow-3.1.8"


def run(cmd: list[str | Path], *, timeout: float = 900, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; AssertionError with its output when it fails."""
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, cmd))} -> rc {done.returncode}\n{done.stdout[-3000:]}\n"
                             f"{done.stderr[-3000:]}")
    return done


def checkout_files() -> list[str]:
    """What a clean clone of this checkout holds: tracked files and new ones git does not ignore."""
    out = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT).stdout
    return sorted(f for f in out.split("\0") if f and (ROOT / f).is_file())


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path
    digest: str


def build_dist() -> Dist:
    """``python -m build`` (sdist, then the wheel built from that sdist, as a release is) in a clean copy."""
    files = checkout_files()
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.encode() + b"\0" + (ROOT / f).read_bytes())
    key = digest.hexdigest()[:16]
    out = WORK / "dist" / key
    WORK.mkdir(parents=True, exist_ok=True)
    with FileLock(str(WORK / "dist.lock")):
        if not (out / "done").exists():
            shutil.rmtree(out, ignore_errors=True)
            src = out / "src"
            for f in files:
                (src / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / f, src / f)
            run([CONTROL_PYTHON, "-m", "build", "--outdir", out / "dist", src], timeout=600)
            (out / "done").write_text("")
    sdists, wheels = sorted((out / "dist").glob("*.tar.gz")), sorted((out / "dist").glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, f"python -m build gave {sdists + wheels}"
    return Dist(sdists[0], wheels[0], key)


def wheel_requirements(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines (its METADATA)."""
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def floors(wheel: Path) -> str:
    """``name==floor`` for each Apache provider the wheel requires with ``>=floor``."""
    lines = []
    for req in wheel_requirements(wheel):
        m = re.fullmatch(r"(apache-airflow-providers-[a-z0-9-]+)\s*>=\s*([0-9.]+)", req)
        if m:
            lines.append(f"{m.group(1)}=={m.group(2)}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Env:
    platform: Platform
    prefix: Path
    constraint_args: tuple[str, ...]
    dist: Dist

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    @property
    def airflow(self) -> Path:
        return self.prefix / "bin" / "airflow"

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        """A process environment for this Airflow alone: its own AIRFLOW_HOME, no checkout on the path. Python
        caches bytecode in the env as it imports (as in a pip-installed env, which pip compiles at install; uv does
        not): each Airflow CLI start here was 3.8 CPU-s compiling what it imports, 1.9 s with the cache."""
        keep = {k: v for k, v in os.environ.items()
                if k in ("PATH", "HOME", "LANG", "TMPDIR", "RAYLIFT_TINY_MODEL") or k.startswith("LC_")}
        return {**keep, "PATH": f"{self.prefix / 'bin'}:{keep.get('PATH', '')}", "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False", **extra}


def platform_env(name: str, dist: Dist) -> Env:
    """A fresh venv with ``name``'s Airflow and the built wheel, installed with uv under the platform's constraints
    (the files MWAA gives pip; uv reads the same ``-c`` files) — once per wheel and platform."""
    platform = PLATFORMS[name]
    prefix = WORK / "envs" / f"{name}-{dist.digest}"
    args: list[str] = []
    for c in platform.constraints:
        args += ["-c", str(DATA / c)]
    with FileLock(str(WORK / f"{name}.lock")):
        if platform.floors:
            floor_file = prefix.parent / f"{name}-{dist.digest}-floors.txt"
            floor_file.parent.mkdir(parents=True, exist_ok=True)
            floor_file.write_text(floors(dist.wheel))
            args += ["-c", str(floor_file)]
        if not (prefix / "done").exists():
            # Earlier wheels' envs of this platform: the newest one is kept (a run of another checkout state may
            # still use it), older ones go, so a developer's edits do not pile up gigabytes.
            others = sorted((p for p in (WORK / "envs").glob(f"{name}-*") if p.is_dir() and p != prefix),
                            key=lambda p: p.stat().st_mtime)
            for old in others[:-1]:
                shutil.rmtree(old, ignore_errors=True)
            shutil.rmtree(prefix, ignore_errors=True)
            run([uv(), "venv", "-q", "--seed", "--python", python(platform.python), prefix])
            run([uv(), "pip", "install", "-q", "--python", prefix / "bin" / "python",
                 f"apache-airflow=={platform.airflow}", str(dist.wheel), *args], timeout=900)
            (prefix / "done").write_text(json.dumps({"wheel": dist.wheel.name, "constraints": args}))
    return Env(platform, prefix, tuple(args), dist)


# Airflow's own parse of a DAGs folder, run in a platform's env (its DagBag moved in 3.2).
PARSE_DAGS = """
import json, sys
try:
    from airflow.dag_processing.dagbag import DagBag  # 3.2+
except ImportError:
    from airflow.models.dagbag import DagBag  # 3.1
bag = DagBag(dag_folder=sys.argv[1])  # examples off: AIRFLOW__CORE__LOAD_EXAMPLES
print(json.dumps({"dag_ids": sorted(bag.dag_ids), "errors": {str(k): str(v) for k, v in bag.import_errors.items()},
                  "files": sorted({d.fileloc for d in bag.dags.values()})}))
"""


def parse_dags(python: Path, folder: Path, env: dict[str, str]) -> dict[str, object]:
    """What ``python``'s Airflow makes of ``folder``: its DAG ids, import errors and the DAGs' files."""
    out: dict[str, object] = json.loads(run([python, "-c", PARSE_DAGS, folder], env=env).stdout.splitlines()[-1])
    return out


def dry_run(py: Path, reqs: list[str], tmp: Path, *extra: str | Path) -> dict[str, str]:
    """pip's choice (``install --dry-run --report``) for ``reqs`` written as a requirements file: name -> version."""
    req_file = tmp / "requirements.txt"
    req_file.write_text("\n".join(reqs) + "\n")
    report = tmp / "report.json"
    run([py, "-m", "pip", "install", "--dry-run", "--quiet", "--report", report, "-r", req_file, *extra], timeout=900)
    data = json.loads(report.read_text())
    return {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in data["install"]}
