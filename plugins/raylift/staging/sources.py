"""Model sources: turn ``model_source`` into a local folder of files to stage.

Supported: a local path or ``file://`` URI; ``s3://bucket/prefix`` (through S3Hook); a hub repo id
(``org/name``, through ``huggingface_hub``, honouring ``HF_ENDPOINT``; ``hf://org/name`` also works).
Each source is checked for something vLLM can load (a config.json and weights) before anything is copied.

Hub downloads use the token given (an Airflow connection's password), else the hub client's own
(``HF_TOKEN``, a cached login); they skip duplicate weight formats by default (see ``hub_ignore_patterns``).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from raylift.errors import ModelSourceError
from raylift.store import safe_key

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
HUB_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# a model's name is a folder (one per '/' part) in the model store: a part over the file-name limit (255 bytes on
# Linux filesystems; the margin is for the temporary names staging writes beside it) failed with ENAMETOOLONG
MODEL_ID_SEGMENT_MAX_BYTES = 200


@dataclass(frozen=True)
class ResolvedSource:
    """A local folder with the model's files, plus the revision it came from."""

    path: Path
    revision: str
    kind: str  # local | s3 | hub
    # hub: the files the filters chose (the shared download cache may hold more from other runs); None: all
    include: frozenset[str] | None = None

    def selected(self, rel: str) -> bool:
        return self.include is None or rel in self.include


def check_model_dir(path: Path, source: str) -> None:
    """Refuse folders vLLM cannot load, naming what is missing."""
    if not path.is_dir():
        raise ModelSourceError(
            f"Model source {source!r} does not exist or is not a directory: set 'model_source' to a model folder, "
            "an s3:// prefix or a hub repo id."
        )
    names = {p.name for p in path.iterdir()}
    if "config.json" not in names and not any(n.endswith(".gguf") for n in names):
        raise ModelSourceError(
            f"Model source {source!r} has no config.json: it does not look like a Hugging Face model folder."
        )
    if not any(n.endswith(WEIGHT_SUFFIXES) for n in names):
        raise ModelSourceError(
            f"Model source {source!r} has no weights (*.safetensors, *.bin, *.gguf): "
            "point 'model_source' at a folder that holds the model weights."
        )


def _from_s3(uri: str, cache_dir: Path, aws_conn_id: str | None) -> ResolvedSource:
    """The objects under ``uri/`` (a folder: ``models/tiny`` never pulls ``models/tiny-llama/…``),
    streamed to a cache folder that ends up holding exactly them."""
    from raylift.store import TMP_MARK, S3Store

    store = S3Store(uri, aws_conn_id=aws_conn_id)
    keys = [safe_key(k) for k in store.list()]
    if not keys:
        raise ModelSourceError(f"Model source {uri!r} holds no objects: check the bucket and prefix.")
    dest = cache_dir / "s3" / safe_key(uri[5:].strip("/"))
    for key in keys:
        store.download_file(key, dest / key)
    for stale in [p for p in dest.rglob("*") if p.is_file() and p.relative_to(dest).as_posix() not in keys]:
        if TMP_MARK not in stale.name:
            stale.unlink()  # an object deleted from the source since the last run
    return ResolvedSource(dest, "s3", "s3")


# Weight formats a vLLM deploy never loads when the repo also has safetensors: the PyTorch/TF/Flax/ONNX
# twins, Meta's original/ checkpoints, and GGUF quantisations (each a full copy of the model).
DUPLICATE_WEIGHT_PATTERNS = (
    "*.bin", "*.pt", "*.pth", "*.ckpt", "*.h5", "*.msgpack", "*.ot", "*.onnx", "*.onnx_data", "*.gguf",
    "original/*", "onnx/*", "openvino/*",
)


def hub_ignore_patterns(files: list[str]) -> list[str]:
    """The default filter: with ``*.safetensors`` in the repo, skip every other weight format; with
    PyTorch ``*.bin`` but no safetensors, skip the rest; a GGUF-only repo is taken whole (pick one
    quantisation with ``hub_allow_patterns``)."""
    if any(f.endswith(".safetensors") for f in files):
        return list(DUPLICATE_WEIGHT_PATTERNS)
    if any(f.endswith(".bin") for f in files):
        return [p for p in DUPLICATE_WEIGHT_PATTERNS if p not in ("*.bin",)]
    return []


def hub_token_from_connection(hf_conn_id: str | None) -> str | None:
    """The hub token kept in an Airflow connection's password (never logged, never returned to XCom)."""
    if not hf_conn_id:
        return None
    from airflow.sdk import BaseHook

    from raylift.secrets import HUB_TOKEN_CONN_TYPES, check_conn_type, clean_field

    conn = BaseHook.get_connection(hf_conn_id)
    # a cluster's (or an AWS) connection named here would hand its credential to the hub
    check_conn_type(hf_conn_id, conn.conn_type, field="hf_conn_id", kinds=HUB_TOKEN_CONN_TYPES, needs="a hub token")
    return clean_field(conn.password, where=f"Airflow connection {hf_conn_id!r}", field="password (the hub token)",
                       secret=True)


def _from_hub(
    repo_id: str,
    revision: str | None,
    cache_dir: Path,
    token: str | None,
    allow_patterns: list[str] | None = None,
    ignore_patterns: list[str] | None = None,
) -> ResolvedSource:
    from huggingface_hub import HfApi, snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    # HF_ENDPOINT is read per call (not at import), so a mirror set for one run is honoured. token=None
    # lets the hub client use HF_TOKEN or a cached login (gated models); a given token wins.
    endpoint = os.environ.get("HF_ENDPOINT") or None
    try:
        if ignore_patterns is None:
            info = HfApi(endpoint=endpoint).model_info(repo_id, revision=revision, token=token)
            ignore_patterns = hub_ignore_patterns([s.rfilename for s in info.siblings or []])
            if ignore_patterns:
                log.info("hub download of %s skips duplicate weight formats: %s", repo_id, ignore_patterns)
            revision = info.sha or revision  # the exact commit listed is the one downloaded
        path = snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=str(cache_dir / "hub"),
            token=token,
            endpoint=endpoint,
            allow_patterns=allow_patterns or None,
            ignore_patterns=ignore_patterns or None,
        )
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise ModelSourceError(
            f"Model {repo_id!r} (revision {revision or 'main'}) was not found on the hub "
            f"({type(exc).__name__}): check the repo id, the revision, and whether it needs a token."
        ) from None
    except (HfHubHTTPError, OSError) as exc:
        raise ModelSourceError(
            f"Could not download {repo_id!r} from the hub: {type(exc).__name__}: {str(exc)[:200]}. "
            "Check HF_ENDPOINT and network access, or pre-stage the model and pass its path."
        ) from None
    from huggingface_hub.utils import filter_repo_objects

    resolved = Path(path)
    present = [p.relative_to(resolved).as_posix() for p in resolved.rglob("*") if p.is_file()]
    include = frozenset(filter_repo_objects(present, allow_patterns=allow_patterns or None,
                                            ignore_patterns=ignore_patterns or None))
    return ResolvedSource(resolved, revision or resolved.name, "hub", include)


def model_id_from_source(source: str) -> str:
    """The model's name in the store when the ``model_id`` Param is left empty: a hub repo id is its own name
    (``org/name``, as vLLM names a model it serves by its repo id); any other source is named by its last path
    segment (``s3://bucket/models/llama-3-8b/`` and ``/data/llama-3-8b`` are ``llama-3-8b``; a tarball drops its
    ``.tar.gz``). ModelSourceError, naming the Param to set, when the source has no such segment."""
    text = source.strip()
    bare = text.removeprefix("hf://")
    if text.startswith("hf://") or (HUB_REPO_RE.match(bare) and not Path(bare).exists() and "://" not in text):
        return bare.split("@")[0]
    path = re.sub(r"^[a-z][a-z0-9+.-]*://", "", text).split("?")[0].rstrip("/")
    name = re.sub(r"\.(tar\.gz|tgz|tar)$", "", path.rsplit("/", 1)[-1])
    if not name or name in (".", "..", "~") or (text.startswith("s3://") and "/" not in path):
        raise ModelSourceError(
            f"Cannot name the model from model_source {source!r}: set the 'model_id' Param (its name in the store)."
        )
    if len(name.encode()) > MODEL_ID_SEGMENT_MAX_BYTES:
        raise ModelSourceError(
            f"model_source {source[:80]!r}... ends in a name of {len(name.encode())} bytes, too long for a folder "
            f"name in the model store (at most {MODEL_ID_SEGMENT_MAX_BYTES} bytes): set the 'model_id' Param to a "
            "shorter name."
        )
    return name


def resolve_source(
    source: str,
    *,
    revision: str | None = None,
    cache_dir: Path,
    aws_conn_id: str | None = "aws_default",
    hf_token: str | None = None,
    allow_patterns: list[str] | None = None,
    ignore_patterns: list[str] | None = None,
) -> ResolvedSource:
    """Map ``source`` to a local folder (downloading when remote) and check it holds a model.

    ``allow_patterns``/``ignore_patterns`` filter hub files (fnmatch, as ``huggingface_hub``); None
    for ``ignore_patterns`` is the default that skips duplicate weight formats, [] takes everything."""
    source = source.strip()
    if not source:
        raise ModelSourceError("'model_source' is empty: give a local path, an s3:// prefix or a hub repo id.")
    if source.startswith("s3://"):
        resolved = _from_s3(source, cache_dir, aws_conn_id)
    elif source.startswith("hf://"):
        resolved = _from_hub(source[5:], revision, cache_dir, hf_token, allow_patterns, ignore_patterns)
    elif source.startswith("file://") or source.startswith(("/", ".", "~")) or Path(source).exists():
        path = Path(source.removeprefix("file://")).expanduser().resolve()
        resolved = ResolvedSource(path, revision or "local", "local")
    elif HUB_REPO_RE.match(source):
        resolved = _from_hub(source, revision, cache_dir, hf_token, allow_patterns, ignore_patterns)
    else:
        raise ModelSourceError(
            f"Cannot tell what kind of model source {source!r} is: use an existing local path, "
            "file://PATH, s3://bucket/prefix, or a hub repo id like org/name."
        )
    check_model_dir(resolved.path, source)
    return resolved
