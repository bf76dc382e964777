"""Every GPU image's CUDA runs on the NVIDIA driver of every GPU AMI the terraform modules pick.

The figures live in ``plugins/raylift/data/gpu_drivers.json``, each with its source: the minimum driver per CUDA
version (NVIDIA's release notes) and the driver each AMI family ships (ECS by SSM parameter, EKS by node group AMI
type or Karpenter alias). The CUDA version of an image is read from its Dockerfile: a ``-cuXYZ`` or
``nvidia/cuda:X.Y`` base, and the CUDA runtime wheel (``nvidia-cuda-runtime``) pinned in a file it COPYs. The AMI
choices are read from the modules with python-hcl2.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests.infra.terraform_model import TerraformModule, blocks, unquote

ROOT = Path(__file__).resolve().parents[2]
TABLE: dict[str, Any] = json.loads((ROOT / "plugins/raylift/data/gpu_drivers.json").read_text())
IMAGES = ROOT / "images"
MODULES = ROOT / "terraform/modules"

_GPU_BASE = re.compile(r"-(?:gpu|cu\d{3,})(?:-|$)|^(?:[\w.-]+/)*nvidia/cuda:")
_BASE_CU = re.compile(r"-cu(\d{2})(\d)(?:-|$)")  # rayproject/ray:2.60.0-py311-cu128 -> 12.8
_BASE_NVIDIA_CUDA = re.compile(r"nvidia/cuda:(\d+)\.(\d+)")  # nvidia/cuda:13.0.1-runtime-ubuntu24.04 -> 13.0
_CUDART_PIN = re.compile(r"^nvidia-cuda-runtime(?:-cu\d+)?==(\d+)\.(\d+)", re.MULTILINE | re.IGNORECASE)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _bases(dockerfile: str) -> list[str]:
    return re.findall(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", dockerfile, re.MULTILINE)


def _copied_files(dockerfile: str) -> list[Path]:
    """Repository files a Dockerfile COPYs (the build context is the repository root)."""
    files = []
    for line in re.findall(r"^COPY\s+(.+)$", dockerfile, re.MULTILINE):
        if "--from=" in line:  # from another build stage, not the repository
            continue
        sources = [arg for arg in line.split() if not arg.startswith("--")][:-1]
        files += [ROOT / source for source in sources if (ROOT / source).is_file()]
    return files


@cache
def gpu_images() -> dict[str, set[str]]:
    """GPU image name -> the CUDA versions (major.minor) it carries."""
    images = {}
    for path in sorted(IMAGES.glob("*/Dockerfile")):
        text = path.read_text()
        bases = _bases(text)
        if not any(_GPU_BASE.search(base) for base in bases):
            continue
        cuda = set()
        for base in bases:
            if match := _BASE_CU.search(base) or _BASE_NVIDIA_CUDA.search(base):
                cuda.add(f"{match[1]}.{match[2]}")
        for copied in _copied_files(text):
            cuda |= {f"{major}.{minor}" for major, minor in _CUDART_PIN.findall(copied.read_text())}
        images[path.parent.name] = cuda
    return images


def _family(key: str, value: str) -> tuple[str, dict[str, Any]]:
    for name, family in TABLE["ami_families"].items():
        if family.get(key) == value:
            return name, family
    raise AssertionError(f"{key} {value!r} is not in plugins/raylift/data/gpu_drivers.json: add its family, "
                         "the NVIDIA driver it ships and the source of that figure")


@cache
def ami_choices() -> list[tuple[str, str, str]]:
    """(where, key, value) for each GPU AMI choice the modules make."""
    choices = []
    ecs = TerraformModule.load(MODULES / "ecs_ray")
    parameters = {unquote(name): unquote(body["name"]) for doc in ecs.docs.values()
                  for dtype, named in blocks(doc, "data") if dtype == "aws_ssm_parameter"
                  for name, body in named.items()}
    for file, doc in ecs.docs.items():
        for rtype, named in blocks(doc, "resource"):
            if rtype != "aws_launch_template":
                continue
            for name, body in named.items():
                ref = re.fullmatch(r"\$\{data\.aws_ssm_parameter\.(\w+)\.value\}", body["image_id"])
                assert ref, f"ecs_ray {file}: launch template {unquote(name)} takes its AMI from an SSM parameter"
                choices.append((f"ecs_ray aws_launch_template.{unquote(name)}", "ssm_parameter", parameters[ref[1]]))
    eks = TerraformModule.load(MODULES / "eks_ray")
    for group, body in eks.variables["node_groups"]["default"].items():
        ami_type = unquote(body["ami_type"])
        if "NVIDIA" in ami_type:
            choices.append((f"eks_ray node group {group}", "eks_ami_type", ami_type))
    for alias in re.findall(r'alias\s*=\s*"(\w+)@', (MODULES / "eks_ray/karpenter.tf").read_text()):
        choices.append(("eks_ray Karpenter EC2NodeClass", "karpenter_alias", alias))
    return choices


def test_table_figures_parse_and_carry_sources() -> None:
    assert TABLE["cuda"] and TABLE["ami_families"]
    for cuda, row in TABLE["cuda"].items():
        assert re.fullmatch(r"\d+\.\d+", cuda) and _version(row["min_driver"]), cuda
        assert row["source"].startswith("https://docs.nvidia.com/"), cuda
    for name, family in TABLE["ami_families"].items():
        assert _version(family["nvidia_driver"]) and family["source"].startswith("https://"), name
        assert {"ssm_parameter", "eks_ami_type", "karpenter_alias"} & set(family), name


def test_each_gpu_image_names_its_cuda_and_the_table_knows_it() -> None:
    images = gpu_images()
    assert "ray-vllm-gpu" in images and not {"ray-vllm-cpu", "ray-neuron", "airflow"} & set(images)
    unknown = {name: cuda for name, cuda in images.items() if not cuda}
    assert unknown == {}, "GPU images whose CUDA version the test cannot read: pin a -cuXYZ base or nvidia-cuda-runtime"
    missing = {name: sorted(cuda - set(TABLE["cuda"])) for name, cuda in images.items() if cuda - set(TABLE["cuda"])}
    assert missing == {}, "add these CUDA versions, with NVIDIA's minimum driver and its source, to gpu_drivers.json"


def test_the_modules_pick_gpu_amis() -> None:
    keys = {key for _, key, _ in ami_choices()}
    assert keys == {"ssm_parameter", "eks_ami_type", "karpenter_alias"}


@pytest.mark.parametrize(("where", "key", "value"), ami_choices(), ids=[where for where, _, _ in ami_choices()])
def test_ami_driver_runs_every_gpu_image(where: str, key: str, value: str) -> None:
    name, family = _family(key, value)
    too_old = [
        f"{image} carries CUDA {cuda}, which needs NVIDIA driver >= {TABLE['cuda'][cuda]['min_driver']} "
        f"({TABLE['cuda'][cuda]['source']})"
        for image, versions in sorted(gpu_images().items()) for cuda in sorted(versions)
        if _version(family["nvidia_driver"]) < _version(TABLE["cuda"][cuda]["min_driver"])
    ]
    assert too_old == [], (f"{where} picks {value} ({name}: NVIDIA {family['nvidia_driver']}, {family['source']}), "
                           f"but " + "; ".join(too_old))


@pytest.mark.parametrize(("where", "key", "value"), ami_choices(), ids=[where for where, _, _ in ami_choices()])
def test_ami_family_is_not_past_end_of_life(where: str, key: str, value: str) -> None:
    name, family = _family(key, value)
    eol = family.get("end_of_life")
    assert eol is None or eol > TABLE["as_of"], (
        f"{where} picks {value} ({name}), past its end of life on {eol} ({family['end_of_life_source']})")
