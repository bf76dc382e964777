"""A staged location used as a source (what raylift_redeploy does with an announced model) stages as a no-op."""

from __future__ import annotations

from pathlib import Path

from raylift.staging import stage_model
from raylift.store import LocalStore
from tests.staging.test_stage import make_model


def test_staging_from_the_staged_location_copies_nothing_and_keeps_the_manifest_out(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    first = stage_model(str(make_model(tmp_path / "src")), store, model_id="org/tiny", cache_dir=tmp_path / "c")
    again = stage_model(first.uri, store, model_id="org/tiny", revision=first.revision, cache_dir=tmp_path / "c")
    assert again.uri == first.uri
    assert (again.copied_files, again.skipped_files) == (0, 3)
    assert sorted(again.files) == sorted(first.files) == ["config.json", "model.safetensors", "tokenizer.json"]
