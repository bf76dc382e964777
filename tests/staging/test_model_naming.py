"""A run that leaves ``model_id`` and ``served_name`` empty gets them from its model source (vLLM's own naming: a hub
model is served by its repo id)."""

from __future__ import annotations

import pytest

from raylift.errors import ModelSourceError
from raylift.staging.sources import model_id_from_source


@pytest.mark.parametrize(("source", "model_id"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
    ("hf://Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    ("s3://models-bucket/models/llama-3-8b/", "llama-3-8b"),
    ("/data/models/tiny-llama", "tiny-llama"),
    ("file:///data/models/tiny-llama/", "tiny-llama"),
    ("https://example.com/x/tiny-t5.tar.gz?X-Amz-Signature=abc", "tiny-t5"),
])
def test_the_model_is_named_by_its_source(source: str, model_id: str) -> None:
    assert model_id_from_source(source) == model_id


def test_a_local_folder_that_looks_like_a_repo_id_is_named_as_a_folder(tmp_path, monkeypatch) -> None:
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert model_id_from_source("org/name") == "name"


@pytest.mark.parametrize("source", ["s3://models-bucket", "s3://models-bucket/", ".", "/"])
def test_a_source_with_no_name_asks_for_the_param(source: str) -> None:
    with pytest.raises(ModelSourceError, match="set the 'model_id' Param"):
        model_id_from_source(source)
