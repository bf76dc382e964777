"""Hub staging's success path against a hub stand-in on 127.0.0.1 (HF_ENDPOINT) serving the tiny model:
the real huggingface_hub client downloads it, a token-protected repo is reached with the token from the
environment or from an Airflow connection, and duplicate weight formats are skipped by default."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from raylift.errors import ModelSourceError
from raylift.staging.sources import hub_ignore_patterns
from raylift.targets.local import LocalTarget
from tests.fixtures.http_standin import JsonHandler, serve_http
from tests.harness.local_stack import tiny_model_path

TOKEN = "hf_standin_secret_token"
SHA = "0123456789abcdef0123456789abcdef01234567"
DUPLICATES = {"pytorch_model.bin": b"B" * 4096, "original/consolidated.00.pth": b"P" * 4096,
              "tiny-Q4_K_M.gguf": b"G" * 2048}


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, object]]:
    """Two repos with the tiny model plus duplicate formats: org/tiny (public), org/gated (token only)."""
    repo = tmp_path / "repo"
    shutil.copytree(tiny_model_path(), repo)
    for rel, data in DUPLICATES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    files = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())
    served: list[str] = []

    class Hub(JsonHandler):
        def _allowed(self, repo_id: str) -> bool:
            if repo_id != "org/gated" or self.headers.get("Authorization") == f"Bearer {TOKEN}":
                return True
            body = b'{"error": "Access to model org/gated is restricted."}'
            self.send_response(401)
            self.send_header("X-Error-Code", "GatedRepo")
            self.send_header("X-Error-Message", "Access to model org/gated is restricted.")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return False

        def do_GET(self) -> None:  # noqa: N802
            path = unquote(self.path.split("?")[0])
            if path.startswith("/api/models/"):
                repo_id = "/".join(path.split("/")[3:5])
                if not self._allowed(repo_id):
                    return
                if "/tree/" in path:  # the listing snapshot_download filters
                    return self._json([{"type": "file", "path": f, "size": (repo / f).stat().st_size,
                                        "oid": hashlib.sha1((repo / f).read_bytes()).hexdigest()} for f in files])
                self._json({"id": repo_id, "sha": SHA, "siblings": [{"rfilename": f} for f in files]})
                return
            parts = path.strip("/").split("/")  # org/name/resolve/<rev>/<file...>
            repo_id, rel = "/".join(parts[:2]), "/".join(parts[4:])
            if not self._allowed(repo_id):
                return
            data = (repo / rel).read_bytes() if rel in files else None
            if data is None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("X-Repo-Commit", SHA)
            self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                served.append(rel)
                self.wfile.write(data)

        do_HEAD = do_GET

    with serve_http(Hub) as port:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no cached login of this machine
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
        yield {"files": files, "served": served}


def staged_names(uri: str) -> set[str]:
    root = Path(uri)
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()} - {"raylift-manifest.json"}


def test_public_repo_is_staged_without_duplicate_weight_formats(hub: dict) -> None:
    staged = LocalTarget().stage_model(source="org/tiny", model_id="org/tiny")
    assert staged.revision == SHA
    expected = {f for f in hub["files"] if f not in DUPLICATES}
    assert staged_names(staged.uri) == set(staged.files) == expected
    assert "model.safetensors" in expected and not set(DUPLICATES) & set(hub["served"])  # never even downloaded
    manifest = json.loads((Path(staged.uri) / "raylift-manifest.json").read_text())
    assert manifest["files"]["model.safetensors"]["sha256"] == hashlib.sha256(
        (tiny_model_path() / "model.safetensors").read_bytes()).hexdigest()


def test_patterns_from_params_choose_the_files(hub: dict) -> None:
    staged = LocalTarget().stage_model(source="org/tiny", model_id="org/tiny", ignore_patterns=[])
    assert staged_names(staged.uri) == set(hub["files"])  # [] takes everything
    only = LocalTarget().stage_model(source="org/tiny", model_id="org/tiny2",
                                     allow_patterns=["*.json", "*.safetensors"])
    assert staged_names(only.uri) == {f for f in hub["files"] if f.endswith((".json", ".safetensors"))}


def test_gated_repo_needs_a_token_and_takes_it_from_the_environment(hub: dict, monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ModelSourceError, match="org/gated"):
        LocalTarget().stage_model(source="org/gated", model_id="org/gated")
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    staged = LocalTarget().stage_model(source="org/gated", model_id="org/gated")
    assert "model.safetensors" in staged.files
    assert TOKEN not in caplog.text


def test_gated_repo_with_the_token_of_an_airflow_connection(hub: dict, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_HF_STANDIN", json.dumps({"conn_type": "huggingface", "password": TOKEN}))
    staged = LocalTarget(hf_conn_id="hf_standin").stage_model(source="org/gated", model_id="org/gated")
    assert "model.safetensors" in staged.files and TOKEN not in caplog.text
    assert TOKEN not in json.dumps(staged.to_xcom())


def test_default_filter_keeps_bin_weights_when_there_are_no_safetensors() -> None:
    assert "*.bin" not in hub_ignore_patterns(["config.json", "pytorch_model.bin", "x.gguf"])
    assert "*.gguf" in hub_ignore_patterns(["config.json", "pytorch_model.bin", "x.gguf"])
    assert hub_ignore_patterns(["config.json", "a-Q4.gguf", "a-Q8.gguf"]) == []


@pytest.mark.parametrize("options", [{"model_stor": "/x"}, {"settings": {"home": "/x"}}])
def test_unknown_local_target_options_are_refused_by_name(options: dict) -> None:
    from raylift.errors import RayliftValueError
    from raylift.targets import get_target

    with pytest.raises(RayliftValueError, match=f"{next(iter(options))}.*not options of the local target"):
        get_target("local", **options)
    assert os.environ.get("HF_TOKEN") is None or True
