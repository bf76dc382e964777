"""HTTPS tarball source: retries with backoff, refuses path traversal and truncated archives.

A real HTTP server on 127.0.0.1 plays the CDN; each test scripts its replies.
"""

from __future__ import annotations

import io
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from raylift.aws.tarball import fetch_tarball, is_tarball_url
from raylift.errors import ModelSourceError, UnsafePathError


def make_tar(members: dict[str, bytes], *, gz: bool = True, link: tuple[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo(link[0])
            info.type, info.linkname = tarfile.SYMTYPE, link[1]
            tf.addfile(info)
    return buf.getvalue()


class Cdn:
    """Replies in order: each item is (status, body, claimed_length or None)."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, bytes, int | None]] = []
        self.hits = 0


@pytest.fixture()
def cdn() -> Iterator[tuple[Cdn, str]]:
    state = Cdn()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            status, body, claimed = state.replies[min(state.hits, len(state.replies) - 1)]
            state.hits += 1
            self.send_response(status)
            self.send_header("Content-Length", str(claimed if claimed is not None else len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_download_retries_then_extracts_single_top_folder(cdn: tuple[Cdn, str], tmp_path: Path) -> None:
    state, url = cdn
    good = make_tar({"mistral/config.json": b"{}", "mistral/model.safetensors": b"w" * 100})
    state.replies = [(503, b"busy", None), (200, good[:50], len(good)), (200, good, None)]
    folder, sha = fetch_tarball(f"{url}/m.tar.gz?X-Amz-Signature=secret", tmp_path, backoff_s=0.01)
    assert state.hits == 3  # a 503 and a short body were both retried
    assert folder.name == "mistral"
    assert (folder / "model.safetensors").read_bytes() == b"w" * 100
    assert len(sha) == 64


def test_gives_up_after_attempts_without_leaking_query(cdn: tuple[Cdn, str], tmp_path: Path) -> None:
    state, url = cdn
    state.replies = [(500, b"", None)]
    with pytest.raises(ModelSourceError, match="failed after 2 attempts") as err:
        fetch_tarball(f"{url}/m.tar?token=secret", tmp_path, attempts=2, backoff_s=0.01)
    assert "secret" not in str(err.value)


@pytest.mark.parametrize(
    ("members", "link"),
    [
        ({"../evil.txt": b"x"}, None),
        ({"/etc/evil": b"x"}, None),
        ({"ok/config.json": b"{}"}, ("ok/escape", "../../outside")),
    ],
)
def test_path_traversal_is_refused(cdn: tuple[Cdn, str], tmp_path: Path, members, link) -> None:
    state, url = cdn
    state.replies = [(200, make_tar(members, link=link), None)]
    with pytest.raises(UnsafePathError, match="Refusing"):
        fetch_tarball(f"{url}/m.tar.gz", tmp_path / "cache")
    assert not (tmp_path / "evil.txt").exists() and not list(tmp_path.rglob("evil*"))


def test_truncated_archive_is_refused(cdn: tuple[Cdn, str], tmp_path: Path) -> None:
    state, url = cdn
    whole = make_tar({"m/config.json": b"{}", "m/model.safetensors": b"w" * 50_000})
    state.replies = [(200, whole[: len(whole) // 2], None)]  # honest length, but the archive itself is cut
    with pytest.raises(ModelSourceError, match="truncated or not a tar archive"):
        fetch_tarball(f"{url}/m.tar.gz", tmp_path)


def test_is_tarball_url() -> None:
    assert is_tarball_url("https://cdn.example/m.tar?sig=1")
    assert not is_tarball_url("https://cdn.example/m.zip")
    assert not is_tarball_url("org/name")


def test_tarball_source_staged_to_s3(cdn: tuple[Cdn, str], aws: str, tmp_path: Path) -> None:
    import boto3

    from raylift.aws.model_staging import S3Destination, stage_model_to_s3

    state, url = cdn
    state.replies = [(200, make_tar({"m/config.json": b"{}", "m/model.safetensors": b"w" * 4096}), None)]
    boto3.client("s3").create_bucket(Bucket="models", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    staged = stage_model_to_s3(
        source=f"{url}/mistral.tar.gz?X-Amz-Signature=secret",
        model_id="mistral",
        destination=S3Destination("models"),
        cache_dir=tmp_path,
    )
    assert staged.revision.startswith("tar-") and staged.copied_files == 2
    assert "secret" not in str(staged.to_xcom())
    assert staged.uri.startswith(f"s3://models/models/mistral/{staged.revision}/")  # + the content folder
    key = f"{staged.uri.removeprefix('s3://models/')}/model.safetensors"
    assert boto3.client("s3").head_object(Bucket="models", Key=key)["ContentLength"] == 4096
