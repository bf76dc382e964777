"""An image's content tag covers exactly what its build reads: the Dockerfile, its ``.dockerignore``, the buildspec
and what the Dockerfile COPYs/ADDs (filtered by the ignore file, as BuildKit sends it), nothing else.

Run on a copy of this repository's own images and the files they copy: a comment in a Serve config YAML (the app
ships as the S3 zip, never in a Ray image) leaves every Ray image's tag alone, so it causes no CodeBuild run and no
cluster-replacing upgrade; an edit to a file a Dockerfile copies gives that image a new tag and the others none.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from raylift.aws.content import build_context_files, dockerignore_excludes, image_content_digest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = sorted(p.parent.name for p in (ROOT / "images").glob("*/Dockerfile"))
RAY_IMAGES = [name for name in IMAGES if name.startswith("ray-")]
# what the images' Dockerfiles read, and what they do not (the app, the tests)
COPIED = ["images", "requirements", "serve_apps", "plugins/raylift", "pyproject.toml", "setup.py", "MANIFEST.in"]


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    for rel in COPIED:
        src, dst = ROOT / rel, root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dst)
    return root


def _tags(root: Path) -> dict[str, str]:
    return {name: image_content_digest(root, name) for name in IMAGES}


def test_the_ray_images_are_all_here() -> None:
    assert set(RAY_IMAGES) == {"ray-vllm-gpu", "ray-vllm-cpu", "ray-llamacpp-arm64", "ray-neuron"}


def test_a_serve_app_edit_changes_no_ray_image_tag(repo: Path) -> None:
    before = _tags(repo)
    config = repo / "serve_apps/configs/llm-gpu.yaml"
    config.write_text(config.read_text() + "# a comment\n")
    (repo / "serve_apps/llm/new_helper.py").write_text("X = 1\n")
    after = _tags(repo)
    assert {n: after[n] for n in RAY_IMAGES} == {n: before[n] for n in RAY_IMAGES}
    # the Airflow image does COPY serve_apps (the DAGs' workers read the configs): its tag follows them
    assert after["airflow"] != before["airflow"]


@pytest.mark.parametrize(
    ("edited", "changes"),
    [
        ("requirements/runtime.lock", {"ray-vllm-gpu", "ray-vllm-cpu", "ray-llamacpp-arm64", "airflow"}),
        ("images/ray-vllm-gpu/gpu-constraints.txt", {"ray-vllm-gpu"}),
        ("images/ray-neuron/Dockerfile", {"ray-neuron"}),
        ("images/ray-llamacpp-arm64/Dockerfile.dockerignore", {"ray-llamacpp-arm64"}),
        ("images/buildspec.yml", set(IMAGES)),  # how every image is built (and in every build context)
        ("requirements/control.lock", {"airflow"}),
        ("plugins/raylift/config.py", {"airflow"}),
    ],
)
def test_an_edit_to_what_a_dockerfile_reads_changes_that_tag_only(repo: Path, edited: str, changes: set[str]) -> None:
    before = _tags(repo)
    path = repo / edited
    path.write_text(path.read_text() + "\n# edited\n")
    after = _tags(repo)
    assert {n for n in IMAGES if after[n] != before[n]} == changes


def test_the_context_holds_what_the_dockerfile_reads_and_nothing_else(repo: Path) -> None:
    assert build_context_files(repo, "ray-neuron") == [
        "images/buildspec.yml", "images/ray-neuron/Dockerfile", "images/ray-neuron/Dockerfile.dockerignore",
    ]
    assert build_context_files(repo, "ray-vllm-gpu") == [
        "images/buildspec.yml", "images/ray-vllm-gpu/Dockerfile", "images/ray-vllm-gpu/Dockerfile.dockerignore",
        "images/ray-vllm-gpu/gpu-constraints.txt", "requirements/runtime.lock",
    ]
    airflow = build_context_files(repo, "airflow")
    assert "plugins/raylift/config.py" in airflow and "serve_apps/configs/llm-gpu.yaml" in airflow
    assert not any(p.startswith(("tests/", "images/ray-")) or "__pycache__" in p for p in airflow)


def test_a_file_the_dockerignore_leaves_out_is_not_an_input(repo: Path) -> None:
    """BuildKit never sends it, so it cannot change the image: bytecode under a COPYed folder, here by the
    Airflow image's own ``**/*.pyc``."""
    before = image_content_digest(repo, "airflow")
    (repo / "plugins/raylift/stray.pyc").write_bytes(b"bytecode")
    assert image_content_digest(repo, "airflow") == before
    (repo / "plugins/raylift/stray.py").write_text("X = 1\n")
    assert image_content_digest(repo, "airflow") != before


@pytest.mark.parametrize(
    ("patterns", "path", "excluded"),
    [
        (["*", "!requirements/runtime.lock"], "requirements/runtime.lock", False),
        (["*", "!requirements/runtime.lock"], "requirements/control.lock", True),
        (["*", "!plugins/raylift"], "plugins/raylift/targets/aws.py", False),  # a folder re-includes its files
        (["*", "!plugins/raylift", "**/__pycache__"], "plugins/raylift/__pycache__/x.pyc", True),
        (["**/*.pyc"], "a/b/c.pyc", True),
        (["docs"], "docs/x/y.md", True),  # a folder excludes what is under it
        (["/docs/*.md", "!docs/keep.md"], "docs/keep.md", False),
        (["doc?"], "docs/a", True),
        (["*.md"], "docs/a.md", False),  # '*' stays within one path element, as in Go's filepath.Match
    ],
)
def test_dockerignore_rules_are_dockers(patterns: list[str], path: str, excluded: bool) -> None:
    assert dockerignore_excludes("\n".join(["# comment", *patterns]), path) is excluded
