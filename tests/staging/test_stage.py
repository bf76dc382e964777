"""Staging into a local model store: manifest, skip-unchanged, bad sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raylift.errors import ModelSourceError, UnsafePathError
from raylift.manifest import MANIFEST_NAME, sha256_file
from raylift.staging import stage_model
from raylift.store import LocalStore


def make_model(path: Path, weights: bytes = b"\x00" * 1024) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "model.safetensors").write_bytes(weights)
    (path / "tokenizer.json").write_text("{}")
    return path


def test_stage_copies_files_and_writes_manifest(tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    store = LocalStore(tmp_path / "store")
    staged = stage_model(str(src), store, model_id="org/tiny", cache_dir=tmp_path / "cache")
    assert staged.copied_files == 3 and staged.skipped_files == 0
    dest = Path(staged.uri)
    assert dest == tmp_path / "store" / "org--tiny" / "local" / f"sha256-{staged.digest[:16]}"
    assert (dest / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    assert manifest["complete"] is True
    assert manifest["files"]["model.safetensors"]["sha256"] == sha256_file(src / "model.safetensors")


def test_restage_skips_unchanged_and_recopies_changed(tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    store = LocalStore(tmp_path / "store")
    stage_model(str(src), store, model_id="m", cache_dir=tmp_path / "c")
    again = stage_model(f"file://{src}", store, model_id="m", cache_dir=tmp_path / "c")
    assert (again.copied_files, again.skipped_files) == (0, 3)
    (src / "model.safetensors").write_bytes(b"\x01" * 2048)
    changed = stage_model(str(src), store, model_id="m", cache_dir=tmp_path / "c")
    # new content, new folder: everything is copied there, the first folder is left as it was
    assert (changed.copied_files, changed.skipped_files, changed.copied_bytes) == (3, 0, 2048 + 25)
    assert changed.uri != again.uri and (Path(again.uri) / "model.safetensors").read_bytes() == b"\x00" * 1024


def test_missing_store_file_is_copied_again(tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    store = LocalStore(tmp_path / "store")
    staged = stage_model(str(src), store, model_id="m", cache_dir=tmp_path / "c")
    (Path(staged.uri) / "tokenizer.json").unlink()
    again = stage_model(str(src), store, model_id="m", cache_dir=tmp_path / "c")
    assert again.copied_files == 1


def test_nonexistent_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="does not exist"):
        stage_model(str(tmp_path / "nope"), LocalStore(tmp_path / "s"), model_id="m", cache_dir=tmp_path)


def test_folder_without_weights_is_refused(tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    (src / "model.safetensors").unlink()
    with pytest.raises(ModelSourceError, match="no weights"):
        stage_model(str(src), LocalStore(tmp_path / "s"), model_id="m", cache_dir=tmp_path)
    assert not (tmp_path / "s").exists()  # nothing was written


def test_unrecognised_source_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="Cannot tell"):
        stage_model("not a source!", LocalStore(tmp_path / "s"), model_id="m", cache_dir=tmp_path)


def test_hub_repo_not_found_names_the_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real HTTP server on 127.0.0.1 answering 404 for everything stands in for the hub.
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_HEAD = do_GET

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        with pytest.raises(ModelSourceError, match="org/missing-model"):
            stage_model("org/missing-model", LocalStore(tmp_path / "s"), model_id="m", cache_dir=tmp_path)
    finally:
        server.shutdown()


@pytest.mark.parametrize("key", ["../x", "/abs", "a/../../b", "a\\b", ""])
def test_store_refuses_escaping_keys(tmp_path: Path, key: str) -> None:
    with pytest.raises(UnsafePathError):
        LocalStore(tmp_path).write_bytes(key, b"x")
