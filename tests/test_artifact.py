"""Content-addressed packages: same tree -> same package (reused); any change -> a new one."""

from __future__ import annotations

import zipfile
from pathlib import Path

from raylift.artifact import PackageInputs, build_package


def tree(tmp_path: Path) -> PackageInputs:
    app = tmp_path / "serve_apps"
    (app / "llm").mkdir(parents=True)
    (app / "llm" / "app.py").write_text("x = 1\n")
    (app / "llm" / "__pycache__").mkdir()
    (app / "llm" / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"junk")
    lock = tmp_path / "runtime.lock"
    lock.write_text("ray==2.60.0\n")
    return PackageInputs(app, (lock,))


def test_unchanged_tree_is_reused(tmp_path: Path) -> None:
    inputs = tree(tmp_path)
    path1, digest1, reused1 = build_package(inputs, tmp_path / "out")
    path2, digest2, reused2 = build_package(inputs, tmp_path / "out")
    assert (path1, digest1) == (path2, digest2) and (reused1, reused2) == (False, True)


def test_change_in_app_or_lock_gives_new_digest(tmp_path: Path) -> None:
    inputs = tree(tmp_path)
    _, d1, _ = build_package(inputs, tmp_path / "out")
    (inputs.app_dir / "llm" / "app.py").write_text("x = 2\n")
    _, d2, _ = build_package(inputs, tmp_path / "out")
    inputs.extra_files[0].write_text("ray==2.61.0\n")
    _, d3, _ = build_package(inputs, tmp_path / "out")
    assert len({d1, d2, d3}) == 3


def test_zip_has_one_top_level_folder_and_no_bytecode(tmp_path: Path) -> None:
    path, digest, _ = build_package(tree(tmp_path), tmp_path / "out")
    names = zipfile.ZipFile(path).namelist()
    assert {n.split("/")[0] for n in names} == {f"serve_apps-{digest[:12]}"}
    assert not any(n.endswith(".pyc") for n in names)
    assert any(n.endswith("_raylift/runtime.lock") for n in names)


def test_rebuild_is_byte_identical(tmp_path: Path) -> None:
    inputs = tree(tmp_path)
    path, _, _ = build_package(inputs, tmp_path / "a")
    again, _, _ = build_package(inputs, tmp_path / "b")
    assert path.read_bytes() == again.read_bytes()


def test_the_real_package_carries_the_manifest_module_as_a_file(tmp_path: Path) -> None:
    """``serve_apps/llm/manifest.py`` links to raylift.manifest; the zip must hold its bytes, not a link."""
    root = Path(__file__).resolve().parents[1]
    path, digest, _ = build_package(PackageInputs(root / "serve_apps"), tmp_path)
    with zipfile.ZipFile(path) as zf:
        packed = zf.read(f"serve_apps-{digest[:12]}/llm/manifest.py")
    assert packed == (root / "plugins/raylift/manifest.py").read_bytes()
