"""Which container image (``images/<name>/Dockerfile``) runs a Serve-config hardware profile on ECS/EKS.

The one owner of the mapping: a profile's hardware class, read off the profile itself
(``raylift.serve.hardware.profile_needs``: NVIDIA GPUs, NeuronCores, an arm64 image, else CPU), names the image
built and deployed for it. A target option ``image_name`` that contradicts the profile is refused, naming both and
what to set, before anything is built or applied. Pure: files under ``images/`` are read, nothing is called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raylift.aws.content import ARM64, dockerfile_path, image_platform
from raylift.serve.hardware import HardwareClass, HardwareProfileError, profile_needs


@dataclass(frozen=True)
class RayImage:
    """One of raylift's Ray images: the hardware class it serves, for messages what it runs."""

    name: str
    serves: HardwareClass
    runs: str


#: the image each hardware class of profile runs (images/README.md describes them)
RAY_IMAGES: tuple[RayImage, ...] = (
    RayImage("ray-vllm-gpu", "gpu", "x86_64, vLLM on NVIDIA GPUs (CUDA)"),
    RayImage("ray-neuron", "neuron", "x86_64, the Neuron DLC's vLLM on Inferentia2"),
    RayImage("ray-llamacpp-arm64", "graviton", "arm64, llama.cpp on Graviton CPUs"),
    RayImage("ray-vllm-cpu", "cpu", "x86_64, vLLM and llama.cpp on CPU"),
)
PROFILE_IMAGES: dict[HardwareClass, str] = {image.serves: image.name for image in RAY_IMAGES}
_BY_NAME = {image.name: image for image in RAY_IMAGES}
#: the image when no profile is known yet (``serve_config: auto`` before any instance of the cluster runs, a step
#: outside a release) and the target options name none: what the terraform examples' GPU instances run
DEFAULT_IMAGE = PROFILE_IMAGES["gpu"]


class ImageProfileError(HardwareProfileError):
    """The image a run would build or deploy cannot run its Serve config's profile (refused before anything is
    built or applied)."""


def profile_class(name: str, config: Mapping[str, Any]) -> HardwareClass:
    """The hardware class Serve config ``config`` (file ``name``) is for: what one replica needs of an instance."""
    needs = profile_needs(name, config)
    if needs.neuron_cores:
        return "neuron"
    if needs.gpus:
        return "gpu"
    return "graviton" if needs.architecture == "arm64" else "cpu"


def profile_image(name: str, config: Mapping[str, Any]) -> str:
    """The image that runs profile ``name``."""
    return PROFILE_IMAGES[profile_class(name, config)]


def describe_image(image_name: str, root: Path) -> str:
    """What an image runs, for messages (raylift's own from the table; another from its Dockerfile's base)."""
    known = _BY_NAME.get(image_name)
    if known is not None:
        return known.runs
    return f"your own image, {'arm64' if image_platform(root, image_name) == ARM64 else 'x86_64'}"


def _contradiction(image_name: str, name: str, config: Mapping[str, Any], root: Path) -> str | None:
    """Why ``image_name`` cannot run profile ``name``, or None when it can. raylift's images serve one class each;
    an image of the user's own (any other ``images/<name>``) is only held to the profile's CPU architecture."""
    if not (root / dockerfile_path(image_name)).is_file():
        known = ", ".join(image.name for image in RAY_IMAGES)
        return f"there is no {dockerfile_path(image_name)} (raylift's images: {known})"
    known_image = _BY_NAME.get(image_name)
    cls = profile_class(name, config)
    if known_image is not None:
        return None if known_image.serves == cls else f"it is for {known_image.serves} profiles"
    architecture = profile_needs(name, config).architecture
    built_for = "arm64" if image_platform(root, image_name) == ARM64 else "x86_64"
    return None if built_for == architecture else f"its base image is {built_for}, the profile's is {architecture}"


def choose_image(
    name: str,
    config: Mapping[str, Any],
    *,
    root: Path,
    where: str,
    explicit: str | None = None,
    release: str | None = None,
    known: bool = True,
) -> str:
    """The image that runs profile ``name`` (Serve config ``config``) on ``where``.

    :param explicit: the target option ``image_name`` (None: the image follows the profile).
    :param release: the image this release already chose (its ``check_hardware_profile`` step), if any.
    :param known: whether the profile is the one the run deploys: False for ``auto`` before any instance of the
        cluster is seen (its CPU pick is a placeholder), which chooses ``explicit``, else ``release``, else
        ``DEFAULT_IMAGE``, and checks nothing.

    ImageProfileError, naming both and what to set, when ``explicit`` cannot run the profile, or when the release's
    image was chosen before the instances were known and they pick a profile it cannot run."""
    if not known:
        return explicit or release or DEFAULT_IMAGE
    wanted = profile_image(name, config)
    cls = profile_class(name, config)
    if explicit:
        why = _contradiction(explicit, name, config, root)
        if why:
            raise ImageProfileError(
                f"Target option image_name {explicit!r} cannot run serve_config {name!r} on {where}: {why}, and "
                f"{name!r} is a {cls} profile, which runs on {wanted!r} ({describe_image(wanted, root)}). Set "
                f"image_name to {wanted!r}, or leave it out (the image then follows the profile), or name a "
                f"serve_config that {explicit!r} runs. Nothing was built or applied."
            )
        return explicit
    if release and release != wanted:
        raise ImageProfileError(
            f"This release built image {release!r} ({describe_image(release, root)}) before {where}'s instances "
            f"were known (serve_config 'auto' cannot see them then), but they pick serve_config {name!r}, a {cls} "
            f"profile, which runs on {wanted!r}. Set the target option image_name to {wanted!r} (or serve_config "
            f"to {name!r}) and run raylift_deploy again. Nothing was applied."
        )
    return wanted
