"""The Compose stack's Airflow side as its image lays it out, without Docker.

The oracle is the project's own files: ``images/airflow/Dockerfile`` (its WORKDIR/COPY steps, filtered by its
``.dockerignore``, and its ``pip install`` of the project), ``docker-compose.yaml`` as Docker Compose resolves it
(the scheduler's environment and mounts) and the README's Compose trigger (its ``--conf``). The test replays the
COPY steps into a folder, installs raylift from there as the image does, non-editable (a wheel), into a fresh
venv, maps every container path of the environment and mounts onto folders, and runs the ``build_artifact``
step's operator with the trigger's target in that layout (the helpers: ``tests/fixtures/compose_layout.py``;
``tests/integration/test_compose_stack.py`` runs the whole trigger through the DAG in the same layout).

The volume test replays each image's ``install -d`` steps: whichever image fills the empty named volume first,
the Airflow services can write ``RAYLIFT_HOME`` and the Ray containers the README's model folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from raylift.artifact import PackageInputs, digest_of
from tests.fixtures.compose_layout import (
    AIRFLOW_SERVICE,
    IMAGE_HOMES,
    ROOT,
    compose_layout,
    image_env,
    install_airflow_image,
    readme_compose_model_path,
    readme_compose_trigger,
    resolved_services,
)
from tests.images.test_dockerfiles import parse_dockerfile, shell_commands

NAMES = {"root": 0, "users": 100}  # the base images' /etc/passwd and /etc/group entries the Dockerfiles use

# The build_artifact step in the layout: Airflow puts the plugins folder on sys.path after site-packages
# (airflow.settings.prepare_syspath_for_config_and_plugins), then the task runs the operator.
STEP = """
import json, os, sys
sys.path.append(os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"])
import raylift
from raylift.config import repo_root
from raylift.operators.build import BuildArtifactOperator
conf = json.loads(sys.argv[1])
op = BuildArtifactOperator(task_id="build_artifact", target=conf["target"], target_options=conf["target_options"])
print(json.dumps({"raylift": raylift.__file__, "root": str(repo_root()), "artifact": op.execute({})}))
"""


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    return resolved_services()


def test_the_compose_layout_builds_the_artifact(resolved: dict[str, Any], tmp_path: Path) -> None:
    service = resolved[AIRFLOW_SERVICE]
    dockerfile = ROOT / service["build"]["dockerfile"]
    fs = tmp_path / "fs"
    python = install_airflow_image(dockerfile, fs, tmp_path / "venv")

    env = compose_layout(service, image_env(dockerfile), fs)
    home = fs / IMAGE_HOMES[service["build"]["dockerfile"]].lstrip("/")
    home.mkdir(parents=True)
    conf = readme_compose_trigger()
    run = subprocess.run(
        [str(python), "-c", STEP, json.dumps(conf)], cwd=env["AIRFLOW_HOME"], capture_output=True, text=True,
        timeout=120, env={"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(home), **env},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])

    site = Path(out["raylift"]).resolve().parents[1]
    assert site.is_relative_to((tmp_path / "venv").resolve()), f"raylift came from {out['raylift']}, not the wheel"
    artifact = out["artifact"]
    package = Path(artifact["working_dir"].removeprefix("file://"))
    assert package.is_file() and package.is_relative_to(Path(env["RAYLIFT_HOME"])), artifact
    # the shipped serve apps and lock are the checkout's: the same package digest
    checkout = PackageInputs(ROOT / "serve_apps", (ROOT / "requirements" / "runtime.lock",))
    assert artifact["digest"] == digest_of(checkout)

    # RAYLIFT_ROOT still wins, and a root without the lock is refused naming it and the setting
    partial = tmp_path / "partial"
    shutil.copytree(ROOT / "serve_apps", partial / "serve_apps")
    run = subprocess.run(
        [str(python), "-c", STEP, json.dumps(conf)], cwd=env["AIRFLOW_HOME"], capture_output=True, text=True,
        timeout=120, env={"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(home), **env,
                          "RAYLIFT_ROOT": str(partial)},
    )
    assert run.returncode != 0
    assert f"requirements/runtime.lock not found under the project root (RAYLIFT_ROOT={partial})" in run.stderr
    assert "set RAYLIFT_ROOT to a folder holding serve_apps and requirements/runtime.lock" in run.stderr


# -- the shared volume's folders ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Folder:
    uid: int
    gid: int
    mode: int


def created_folders(dockerfile: Path) -> dict[str, Folder]:
    """Folders the Dockerfile's ``install -d -o OWNER -g GROUP -m MODE`` commands create."""
    commands = shell_commands(parse_dockerfile(dockerfile.read_text()))
    users = dict(NAMES)
    users.update({words[-1]: int(words[words.index("--uid") + 1]) for words in commands
                  if words[0] == "useradd" and "--uid" in words})
    folders = {}
    for words in commands:
        if words[:2] != ["install", "-d"]:
            continue
        opts = dict(zip(words[2::2], words[3::2], strict=False))
        paths = [w for w in words[2:] if w.startswith("/")]
        owner, group = opts.get("-o", "0"), opts.get("-g", "0")
        for path in paths:
            folders[path] = Folder(
                int(owner) if owner.isdigit() else users[owner],
                int(group) if group.isdigit() else users[group],
                int(opts.get("-m", "755"), 8),
            )
    return folders


def final_user(dockerfile: Path) -> str:
    return [ins.args for ins in parse_dockerfile(dockerfile.read_text()) if ins.keyword == "USER"][-1]


def can_write(user: tuple[int, int], folder: Folder | None) -> bool:
    if folder is None:
        return False
    uid, gid = user
    if uid == 0:
        return True
    bit = 0o200 if uid == folder.uid else 0o020 if gid == folder.gid else 0o002
    return bool(folder.mode & bit)


def test_either_image_fills_the_shared_volume_with_folders_both_sides_can_write(resolved: dict[str, Any]) -> None:
    volume_users: dict[str, list[tuple[str, tuple[int, int], str]]] = {}
    for name, service in resolved.items():
        build = service.get("build")
        for volume in service.get("volumes", []):
            if volume["type"] != "volume" or build is None:
                continue
            dockerfile = ROOT / build["dockerfile"]
            uid, _, gid = (service.get("user") or final_user(dockerfile)).partition(":")
            volume_users.setdefault(volume["target"], []).append((name, (int(uid), int(gid or 0)), build["dockerfile"]))
    shared = volume_users["/opt/raylift/var"]
    images = sorted({dockerfile for _, _, dockerfile in shared})
    assert len(images) == 2, images
    home = resolved[AIRFLOW_SERVICE]["environment"]["RAYLIFT_HOME"]
    models = str(Path(readme_compose_model_path()).parent)
    problems = []
    for first in images:  # the image whose folder an empty named volume copies
        folders = created_folders(ROOT / first)
        for name, user, _ in shared:
            where = home if name.startswith("airflow") else models
            if not can_write(user, folders.get(where)):
                problems.append(f"{name} (uid:gid {user[0]}:{user[1]}) cannot write {where} when {first} "
                                f"fills the volume ({folders.get(where) or 'the image does not create it'})")
    assert not problems, "\n".join(problems)


def test_the_volume_check_catches_a_folder_no_image_creates(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM a:1\nRUN mkdir -p /opt/raylift/var\nUSER 1000:100\n")
    assert created_folders(bad) == {}
    assert not can_write((1000, 100), Folder(50000, 0, 0o2775))
    assert can_write((50000, 0), Folder(1000, 0, 0o2775))
