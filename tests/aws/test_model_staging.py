"""S3 model staging against the real moto server (through a proxy where a test needs faults)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import boto3
import pytest

from raylift.aws.model_staging import S3Destination, stage_model_to_s3
from raylift.aws.s3_transfer import MiB, S3Uploader, TransferSettings
from raylift.errors import CredentialsError, StagingError
from tests.aws.standins import Proxy, s3_error

BUCKET = "models"
SMALL = TransferSettings(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB, max_concurrency=4, max_attempts=4)


def make_model(root: Path, big: bool = False) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (root / "tokenizer.json").write_text("{}")
    (root / "model-00001.safetensors").write_bytes(os.urandom(64 * 1024))
    (root / "model-00002.safetensors").write_bytes(os.urandom((11 * MiB) if big else 32 * 1024))
    return root


def s3() -> boto3.client:
    return boto3.client("s3")


@pytest.fixture()
def bucket(aws: str) -> str:
    s3().create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    return BUCKET


def test_stage_uploads_multipart_with_storage_class_and_manifest(bucket: str, tmp_path: Path) -> None:
    src = make_model(tmp_path / "src", big=True)
    dest = S3Destination(bucket, "models", storage_class="INTELLIGENT_TIERING")
    staged = stage_model_to_s3(
        source=str(src), model_id="org/tiny", revision="r1", destination=dest, cache_dir=tmp_path / "c", settings=SMALL
    )
    assert staged.uri == f"s3://models/models/org--tiny/r1/sha256-{staged.digest[:16]}"
    prefix = staged.uri.removeprefix("s3://models/")
    assert staged.copied_files == 4 and staged.skipped_files == 0
    head = s3().head_object(Bucket=bucket, Key=f"{prefix}/model-00002.safetensors")
    assert head["ContentLength"] == 11 * MiB
    assert head["ETag"].strip('"').endswith("-3")  # 11 MiB in 5 MiB parts: a multipart upload
    assert head["StorageClass"] == "INTELLIGENT_TIERING"
    assert head["Metadata"]["sha256"] == staged.files["model-00002.safetensors"]["sha256"]
    manifest = json.loads(
        s3().get_object(Bucket=bucket, Key=f"{prefix}/raylift-manifest.json")["Body"].read()
    )
    assert manifest["complete"] is True and set(manifest["files"]) == set(staged.files)

    again = stage_model_to_s3(
        source=str(src), model_id="org/tiny", revision="r1", destination=dest, cache_dir=tmp_path / "c", settings=SMALL
    )
    assert (again.copied_files, again.skipped_files) == (0, 4)


def test_rerun_reuploads_what_changed_in_s3(bucket: str, tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    dest = S3Destination(bucket, "models")
    first = stage_model_to_s3(source=str(src), model_id="m", revision="r", destination=dest, cache_dir=tmp_path / "c")
    prefix = first.uri.removeprefix(f"s3://{bucket}/")
    s3().put_object(Bucket=bucket, Key=f"{prefix}/tokenizer.json", Body=b"tampered!")
    uploader = S3Uploader(bucket)
    with pytest.raises(StagingError, match="tokenizer.json: size 9 != 2"):
        uploader.verify({f"{prefix}/tokenizer.json": {"size": 2, "sha256": "x"}})
    again = stage_model_to_s3(source=str(src), model_id="m", revision="r", destination=dest, cache_dir=tmp_path / "c")
    assert (again.copied_files, again.skipped_files) == (1, 3)
    assert s3().get_object(Bucket=bucket, Key=f"{prefix}/tokenizer.json")["Body"].read() == b"{}"


def test_interrupted_run_resumes_without_reuploading(bucket: str, s3_proxy: Proxy, tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    dest = S3Destination(bucket, "models")
    # One file is refused: the run fails naming it; the files uploaded beside it are recorded as done.
    s3_proxy.rule = lambda method, path: (
        s3_error(403, "AccessDenied", "denied") if method == "PUT" and path.startswith("/models/models/m/r/sha256-") and "/model-00002" in path else None
    )
    with pytest.raises(StagingError, match="model-00002.safetensors .*failed after retries"):
        stage_model_to_s3(source=str(src), model_id="m", revision="r", destination=dest, cache_dir=tmp_path / "c")
    (folder,) = {k["Key"].rsplit("/", 1)[0] for k in s3().list_objects_v2(Bucket=bucket, Prefix="models/m/r/")["Contents"]}
    partial = json.loads(s3().get_object(Bucket=bucket, Key=f"{folder}/raylift-manifest.json")["Body"].read())
    assert partial["complete"] is False and "model-00002.safetensors" not in partial["files"]
    assert partial["files"], "the files that finished are in the progress manifest"
    s3_proxy.rule = None
    s3_proxy.seen.clear()
    resumed = stage_model_to_s3(source=str(src), model_id="m", revision="r", destination=dest, cache_dir=tmp_path / "c")
    unfinished = sorted(set(resumed.files) - set(partial["files"]))
    assert (resumed.copied_files, resumed.skipped_files) == (len(unfinished), 4 - len(unfinished))
    data_puts = sorted(p for m, p, _ in s3_proxy.seen if m == "PUT" and "manifest" not in p)
    assert data_puts == [f"/models/{folder}/{rel}" for rel in unfinished]  # nothing finished is sent again


def test_unchanged_model_is_checked_without_reading_it(bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = make_model(tmp_path / "src")
    dest = S3Destination(bucket, "models")
    first = stage_model_to_s3(source=str(src), model_id="m", revision="r", destination=dest, cache_dir=tmp_path / "c")
    import raylift.aws.model_staging as staging

    def no_reading(path: Path) -> str:
        raise AssertionError(f"{path} was hashed again")

    with monkeypatch.context() as patched:
        patched.setattr(staging, "sha256_file", no_reading)
        again = stage_model_to_s3(source=str(src), model_id="m", revision="r", destination=dest, cache_dir=tmp_path / "c")
    assert (again.copied_files, again.skipped_files, again.files) == (0, 4, first.files)
    (src / "tokenizer.json").write_text('{"changed": 1}')  # a new mtime and size: hashed again: new content,
    changed = stage_model_to_s3(source=str(src), model_id="m", revision="r", destination=dest, cache_dir=tmp_path / "c")
    assert changed.uri != first.uri and (changed.copied_files, changed.skipped_files) == (4, 0)  # new folder
    key = f"{changed.uri.removeprefix(f's3://{bucket}/')}/tokenizer.json"
    assert s3().get_object(Bucket=bucket, Key=key)["Body"].read() == b'{"changed": 1}'


def test_throttling_is_retried(bucket: str, s3_proxy: Proxy, tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    throttled: list[str] = []

    def slow_down_twice(method: str, path: str):
        if method == "PUT" and "safetensors" in path and len(throttled) < 2:
            throttled.append(path)
            return s3_error(503, "SlowDown", "Please reduce your request rate.")
        return None

    s3_proxy.rule = slow_down_twice
    staged = stage_model_to_s3(
        source=str(src), model_id="m", revision="r", destination=S3Destination(bucket), cache_dir=tmp_path / "c"
    )
    assert len(throttled) == 2
    assert staged.copied_files == 4
    key = f"{staged.uri.removeprefix(f's3://{bucket}/')}/model-00001.safetensors"
    assert s3().head_object(Bucket=bucket, Key=key)["ContentLength"] == 64 * 1024


def test_missing_bucket_is_a_clear_error(aws: str, tmp_path: Path) -> None:
    src = make_model(tmp_path / "src")
    with pytest.raises(StagingError, match="S3 bucket 'absent' does not exist"):
        stage_model_to_s3(source=str(src), model_id="m", destination=S3Destination("absent"), cache_dir=tmp_path)


def test_no_credentials_is_a_clear_error(aws: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(CredentialsError):
        stage_model_to_s3(source=str(tmp_path), model_id="m", destination=S3Destination("b"), cache_dir=tmp_path)


def test_unknown_storage_class_is_refused(aws: str) -> None:
    with pytest.raises(StagingError, match="Unknown S3 storage class 'COLD'"):
        S3Uploader("b", storage_class="COLD")


def test_s3_source_is_a_folder_streamed_to_disk(bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """s3://b/models/tiny never pulls models/tiny-llama/...; objects are downloaded to files, not read whole."""
    from raylift.staging import stage_model
    from raylift.store import LocalStore, S3Store

    for rel, body in {"config.json": b"{}", "model.safetensors": b"\x01" * 2048, "tokenizer.json": b"{}"}.items():
        s3().put_object(Bucket=bucket, Key=f"src/tiny/{rel}", Body=body)
    s3().put_object(Bucket=bucket, Key="src/tiny-llama/model.safetensors", Body=b"\x02" * 99)  # a neighbour
    monkeypatch.setattr(S3Store, "read_bytes", lambda *a: pytest.fail("an S3 model object was read into memory"))
    staged = stage_model(f"s3://{bucket}/src/tiny", LocalStore(tmp_path / "store"), model_id="m",
                         cache_dir=tmp_path / "c")
    assert sorted(staged.files) == ["config.json", "model.safetensors", "tokenizer.json"]
    assert staged.files["model.safetensors"]["size"] == 2048
