"""serve_apps/llm/model_location.py: an s3:// model staged by raylift, pulled into a replica's cache
(moto server over HTTP), or found under a mounted path; checked against raylift's manifest."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import boto3
import pytest

from raylift.aws.model_staging import S3Destination, stage_model_to_s3

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "raylift-models"


def load_module() -> ModuleType:
    """The module as the replica imports it (serve_apps is not a package of the control env; the replica has the
    package's root on its path, so ``llm.manifest`` resolves there as it does here)."""
    if str(ROOT / "serve_apps") not in sys.path:
        sys.path.insert(0, str(ROOT / "serve_apps"))
    spec = importlib.util.spec_from_file_location("model_location", ROOT / "serve_apps/llm/model_location.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ml = load_module()


@pytest.fixture()
def staged(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A small model staged by raylift itself: s3://raylift-models/models/tiny/main/sha256-<digest> (+ manifest)."""
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv(ml.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv(ml.MOUNT_ENV, raising=False)
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    src = tmp_path / "model"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text('{"model_type": "llama"}')
    (src / "model.safetensors").write_bytes(os.urandom(3000))
    (src / "sub" / "tokenizer.json").write_text("{}")
    staged = stage_model_to_s3(
        source=str(src), model_id="tiny", revision="main", destination=S3Destination(BUCKET), cache_dir=tmp_path / "c"
    )
    return staged.uri


def test_local_paths_and_hub_ids_pass_through() -> None:
    assert ml.resolve_model("/models/tiny") == "/models/tiny"
    assert ml.resolve_model("org/name") == "org/name"


def test_s3_model_is_downloaded_verified_and_reused(staged: str, tmp_path: Path) -> None:
    folder = Path(ml.resolve_model(staged))
    assert folder == tmp_path / "cache" / BUCKET / staged.removeprefix(f"s3://{BUCKET}/")
    assert (folder / "sub/tokenizer.json").read_text() == "{}"
    assert len((folder / "model.safetensors").read_bytes()) == 3000
    mtime = (folder / "model.safetensors").stat().st_mtime_ns

    (folder / "sub/tokenizer.json").write_text("{ }")  # damaged copy: fetched again
    (folder / "old-shard.safetensors").write_bytes(b"x")  # not staged: removed, vLLM must not load it
    assert Path(ml.resolve_model(staged)) == folder
    assert (folder / "sub/tokenizer.json").read_text() == "{}"
    assert not (folder / "old-shard.safetensors").exists()
    assert (folder / "model.safetensors").stat().st_mtime_ns == mtime  # unchanged file kept, not re-downloaded


def test_object_that_differs_from_the_manifest_is_refused(staged: str) -> None:
    boto3.client("s3").put_object(Bucket=BUCKET, Key=f"{staged.removeprefix(f's3://{BUCKET}/')}/config.json", Body=b'{"model_type": "gpt2"}')
    with pytest.raises(ml.ModelLocationError, match="config.json does not match raylift's manifest"):
        ml.resolve_model(staged)


def test_a_streamed_model_is_checked_and_handed_to_vllm_as_its_s3_uri_with_nothing_on_disk(
    staged: str, tmp_path: Path
) -> None:
    """load_format runai_streamer: vLLM's streamer reads the prefix itself; the replica only checks (one listing)
    that every file of raylift's manifest is there with its size, and writes nothing."""
    assert ml.resolve_model(staged + "/", streamed=True) == staged
    assert not (tmp_path / "cache").exists()
    key = staged.removeprefix(f"s3://{BUCKET}/")
    s3 = boto3.client("s3")
    s3.put_object(Bucket=BUCKET, Key=f"{key}/model.safetensors", Body=b"short")  # replaced after staging
    with pytest.raises(ml.ModelLocationError, match=r"model.safetensors is 5 bytes, staged 3000\): re-run the stage"):
        ml.resolve_model(staged, streamed=True)
    s3.delete_object(Bucket=BUCKET, Key=f"{key}/sub/tokenizer.json")
    with pytest.raises(ml.ModelLocationError, match=r"sub/tokenizer.json missing"):
        ml.resolve_model(staged, streamed=True)


def test_manifest_paths_that_escape_the_prefix_are_refused(staged: str) -> None:
    s3 = boto3.client("s3")
    key = f"{staged.removeprefix(f's3://{BUCKET}/')}/raylift-manifest.json"
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    manifest["files"]["../../other/secret"] = {"size": 1, "sha256": "0" * 64}
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(manifest).encode())
    with pytest.raises(ml.ModelLocationError, match="escape"):
        ml.resolve_model(staged)


def test_incomplete_staging_is_refused(staged: str) -> None:
    s3 = boto3.client("s3")
    key = f"{staged.removeprefix(f's3://{BUCKET}/')}/raylift-manifest.json"
    manifest = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()) | {"complete": False}
    s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(manifest).encode())
    with pytest.raises(ml.ModelLocationError, match="did not finish"):
        ml.resolve_model(staged)


def test_mounted_copy_is_used_without_downloading(staged: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a mount of the bucket's models/ prefix at HF_HOME, as a Mountpoint-for-S3 volume would show it
    mount = tmp_path / "mnt"
    s3 = boto3.client("s3")
    for obj in s3.list_objects_v2(Bucket=BUCKET, Prefix="models/")["Contents"]:
        path = mount / obj["Key"].removeprefix("models/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(s3.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read())
    monkeypatch.setenv("HF_HOME", str(mount))
    assert ml.resolve_model(staged) == str(mount / staged.removeprefix(f"s3://{BUCKET}/models/"))
    assert not (tmp_path / "cache").exists()
    (mount / staged.removeprefix(f"s3://{BUCKET}/models/") / "model.safetensors").write_bytes(b"short")  # a copy that is not the staged one
    assert ml.resolve_model(staged) == str(tmp_path / "cache" / BUCKET / staged.removeprefix(f"s3://{BUCKET}/"))


def test_unreadable_bucket_names_the_fix(aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ml.CACHE_ENV, str(tmp_path / "cache"))
    with pytest.raises(ml.ModelLocationError, match="no-such-bucket.*credentials"):
        ml.resolve_model("s3://no-such-bucket/models/tiny/main")


def test_the_serve_app_reads_manifests_with_raylifts_own_module() -> None:
    """One definition of a staged folder: the app's ``llm.manifest`` is raylift.manifest (a link that the
    serve-app package carries as a file), not a copy that could drift."""
    import raylift.manifest

    link = ROOT / "serve_apps/llm/manifest.py"
    assert link.is_symlink() and link.resolve() == Path(raylift.manifest.__file__).resolve()
    assert ml.MANIFEST_NAME == raylift.manifest.MANIFEST_NAME
    assert ml.manifest.sha256_file(link) == raylift.manifest.sha256_file(link)
    with pytest.raises(ml.ModelLocationError, match="escape"):
        ml.safe_rel("../outside")
