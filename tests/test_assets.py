"""The staged-model Asset: URIs Airflow accepts for both store kinds, an extra without the source, and which
model store an announced model lies in (a redeploy reaches only that store's clusters)."""

from __future__ import annotations

from pathlib import Path

from raylift.assets import model_asset, model_asset_uri, staged_in, staged_model_alias, staged_model_extra
from raylift.config import STAGED_MODEL_ALIAS
from raylift.records import StagedModel


def staged(uri: str) -> StagedModel:
    return StagedModel(
        model_id="org/model", revision="abc123", uri=uri, manifest_uri=f"{uri}/raylift-manifest.json",
        files={"model.safetensors": {"size": 1, "sha256": "00"}}, copied_files=1,
    )


def test_local_store_location_becomes_a_file_uri() -> None:
    asset = model_asset(staged("/var/raylift/model-store/org--model/abc123/"))
    assert asset.uri == "file:///var/raylift/model-store/org--model/abc123"
    assert asset.name == asset.uri


def test_s3_location_is_kept_as_is_without_trailing_slash() -> None:
    assert model_asset_uri("s3://bucket/prefix/org--model/abc123/") == "s3://bucket/prefix/org--model/abc123"
    location = "s3://bucket/prefix/org--model/abc123"
    assert model_asset(staged(location)).uri == location


def test_extra_names_the_model_and_where_it_is_but_not_its_files() -> None:
    extra = staged_model_extra(staged("s3://bucket/m/abc123"))
    assert extra == {
        "model_id": "org/model",
        "revision": "abc123",
        "uri": "s3://bucket/m/abc123",
        "manifest_uri": "s3://bucket/m/abc123/raylift-manifest.json",
    }


def test_alias_name_comes_from_config() -> None:
    assert staged_model_alias().name == STAGED_MODEL_ALIAS


def test_a_model_lies_in_the_store_whose_folder_or_prefix_holds_it(tmp_path: Path) -> None:
    store = tmp_path / "prod-store"
    assert staged_in(str(store / "org--model" / "abc123"), str(store))
    assert staged_in(f"file://{store}/org--model/abc123", f"{store}/")
    assert not staged_in(str(tmp_path / "dev-store" / "org--model" / "abc123"), str(store))
    assert not staged_in(str(tmp_path / "prod-store-2" / "org--model"), str(store))  # a sibling, not inside
    assert staged_in("s3://models/prod/org--model/abc123", "s3://models/prod/")
    assert not staged_in("s3://models/prod-eu/org--model/abc123", "s3://models/prod")
    assert not staged_in(str(store / "org--model"), "s3://models/prod")


def test_a_store_reached_through_a_symlink_is_the_same_store(tmp_path: Path) -> None:
    real = tmp_path / "real-store"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    assert staged_in(str(real / "org--model" / "v1"), str(tmp_path / "link"))
