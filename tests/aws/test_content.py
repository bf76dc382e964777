"""Content tags: same inputs, same tag; any edit or rename of what the Dockerfile reads, a new one; missing inputs
named. (What it does not read leaves the tag alone: tests/aws/test_image_inputs.py, on this repository's images.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from raylift.aws.content import collect_files, image_content_digest, image_inputs, image_tag
from raylift.errors import BuildError


def checkout(root: Path) -> Path:
    (root / "images/ray-vllm").mkdir(parents=True)
    (root / "images/ray-vllm/Dockerfile").write_text("FROM ray\nCOPY requirements/runtime.lock serve_apps/llm /w/\n")
    (root / "requirements").mkdir()
    (root / "requirements/runtime.lock").write_text("vllm==1\n")
    (root / "serve_apps/llm/__pycache__").mkdir(parents=True)
    (root / "serve_apps/llm/app.py").write_text("x = 1\n")
    (root / "serve_apps/llm/__pycache__/app.cpython-311.pyc").write_bytes(b"junk")
    return root


def test_tag_is_stable_and_ignores_bytecode(tmp_path: Path) -> None:
    a, b = checkout(tmp_path / "a"), checkout(tmp_path / "b")
    assert image_content_digest(a, "ray-vllm") == image_content_digest(b, "ray-vllm")
    (b / "serve_apps/llm/__pycache__/app.cpython-311.pyc").write_bytes(b"other junk")
    assert image_content_digest(a, "ray-vllm") == image_content_digest(b, "ray-vllm")
    assert collect_files(a, image_inputs(a, "ray-vllm")) == [
        "images/ray-vllm/Dockerfile",
        "requirements/runtime.lock",
        "serve_apps/llm/app.py",
    ]
    assert len(image_tag(image_content_digest(a, "ray-vllm"))) == 20


@pytest.mark.parametrize("change", ["edit", "rename", "lock"])
def test_any_input_change_is_a_new_tag(tmp_path: Path, change: str) -> None:
    root = checkout(tmp_path)
    before = image_content_digest(root, "ray-vllm")
    if change == "edit":
        (root / "serve_apps/llm/app.py").write_text("x = 2\n")
    elif change == "rename":
        (root / "serve_apps/llm/app.py").rename(root / "serve_apps/llm/main.py")
    else:
        (root / "requirements/runtime.lock").write_text("vllm==2\n")
    assert image_content_digest(root, "ray-vllm") != before


def test_missing_dockerfile_is_named(tmp_path: Path) -> None:
    root = checkout(tmp_path)
    with pytest.raises(BuildError, match="'images/other/Dockerfile' is missing"):
        image_content_digest(root, "other")


def test_copy_sources_and_platform_come_from_the_dockerfile(tmp_path: Path) -> None:
    from raylift.aws.content import build_context_files, build_context_zip, copy_sources, image_platform

    text = ("FROM rayproject/ray:2.60.0-py311-aarch64 AS build\nCOPY --from=build /w /w\n"
            "COPY --chown=ray:users requirements/runtime.lock \\\n  # a comment\n  extra.txt ./\n")
    assert copy_sources(text) == ["requirements/runtime.lock", "extra.txt"]
    root = checkout(tmp_path)
    (root / "images/ray-vllm/Dockerfile").write_text(text)
    (root / "extra.txt").write_text("x")
    assert image_platform(root, "ray-vllm") == "linux/arm64"
    assert "extra.txt" in build_context_files(root, "ray-vllm")
    first, digest = build_context_zip(root, "ray-vllm", tmp_path / "a")
    again, _ = build_context_zip(root, "ray-vllm", tmp_path / "b")
    assert first.read_bytes() == again.read_bytes() and first.name == f"{digest}.zip"  # deterministic
