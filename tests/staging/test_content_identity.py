"""A staged model is named by its content: new weights, new folder; files never mix; copies are verified."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from raylift.errors import StagingError
from raylift.manifest import MANIFEST_NAME, content_digest, sha256_file
from raylift.staging import stage_model
from raylift.store import TMP_MARK, LocalStore
from tests.staging.test_stage import make_model


def test_new_weights_under_the_same_name_get_a_new_folder_and_files_never_mix(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    src = make_model(tmp_path / "a")
    (src / "model.safetensors").unlink()  # A: sharded
    for i in (1, 2):
        (src / f"model-0000{i}-of-00002.safetensors").write_bytes(bytes([i]) * 512)
    a = stage_model(str(src), store, model_id="org/tiny", cache_dir=tmp_path / "c")
    b = stage_model(str(make_model(tmp_path / "b", b"\x07" * 999)), store, model_id="org/tiny",
                    cache_dir=tmp_path / "c")  # B: one file, same model_id and revision
    assert a.revision == b.revision == "local" and a.digest != b.digest and a.uri != b.uri
    assert Path(a.uri).parent == Path(b.uri).parent  # <model>/<revision>/sha256-<digest>
    assert sorted(p.name for p in Path(b.uri).iterdir()) == [
        "config.json", "model.safetensors", MANIFEST_NAME, "tokenizer.json"]  # no shard of A
    assert {p.name for p in Path(a.uri).iterdir()} >= {"model-00001-of-00002.safetensors"}  # A left intact
    manifest = json.loads((Path(b.uri) / MANIFEST_NAME).read_text())
    assert manifest["digest"] == b.digest == content_digest(manifest["files"])


def test_a_copy_whose_bytes_differ_never_gets_its_name(tmp_path: Path) -> None:
    src = tmp_path / "w.safetensors"
    src.write_bytes(b"new bytes")
    store = LocalStore(tmp_path / "store")
    with pytest.raises(StagingError, match="changed while it was being staged"):
        store.upload_file("m/w.safetensors", src, sha256=sha256_file(src).replace("a", "b", 1).replace("0", "1", 1))
    assert not (tmp_path / "store/m/w.safetensors").exists()
    assert not [p for p in (tmp_path / "store/m").iterdir() if TMP_MARK in p.name]  # no temp left behind


def test_source_changing_after_it_was_hashed_fails_the_stage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_model(tmp_path / "src")
    import raylift.staging.stage as stage_mod

    real = stage_mod.file_entry

    def entry_then_change(path: Path) -> dict:
        entry = real(path)
        if path.name == "model.safetensors":
            path.write_bytes(b"\x09" * 1024)  # same size, other bytes: written while staging
        return entry

    monkeypatch.setattr(stage_mod, "file_entry", entry_then_change)
    with pytest.raises(StagingError, match="changed while it was being staged"):
        stage_model(str(src), LocalStore(tmp_path / "store"), model_id="m", cache_dir=tmp_path / "c")
    staged_files = list((tmp_path / "store").rglob("model.safetensors"))
    assert staged_files == []


def test_two_stagers_of_one_model_at_once_leave_one_verified_copy(tmp_path: Path) -> None:
    src = make_model(tmp_path / "src", b"\x03" * (4 * 1024 * 1024))
    store = LocalStore(tmp_path / "store")
    results, errors = [], []

    def run() -> None:
        try:
            results.append(stage_model(str(src), store, model_id="m", cache_dir=tmp_path / "c"))
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len({r.uri for r in results}) == 1
    folder = Path(results[0].uri)
    assert sha256_file(folder / "model.safetensors") == sha256_file(src / "model.safetensors")
    assert not [p for p in folder.iterdir() if TMP_MARK in p.name]


def test_files_not_in_the_manifest_are_removed_from_the_content_folder(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    src = make_model(tmp_path / "src")
    first = stage_model(str(src), store, model_id="m", cache_dir=tmp_path / "c")
    (Path(first.uri) / "stray.safetensors").write_bytes(b"x")
    again = stage_model(str(src), store, model_id="m", cache_dir=tmp_path / "c")
    assert again.uri == first.uri and not (Path(first.uri) / "stray.safetensors").exists()
