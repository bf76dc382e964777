"""Model sources: turn ``model_source`` into a local folder of files to stage.

Supported: a local path or ``file://`` URI; ``s3://bucket/prefix`` (through S3Hook); a hub repo id
(``org/name``, through ``huggingface_hub``, honouring ``HF_ENDPOINT``; ``hf://org/name`` also works).
Each source is checked for something vLLM can load (a config.json and weights) before anything is copied.
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


@dataclass(frozen=True)
class ResolvedSource:
    """A local folder with the model's files, plus the revision it came from."""

    path: Path
    revision: str
    kind: str  # local | s3 | hub


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
    from raylift.store import S3Store

    store = S3Store(uri, aws_conn_id=aws_conn_id)
    keys = list(store.list())
    if not keys:
        raise ModelSourceError(f"Model source {uri!r} holds no objects: check the bucket and prefix.")
    dest = cache_dir / "s3" / safe_key(uri[5:].strip("/"))
    for key in keys:
        target = dest / safe_key(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(store.read_bytes(key))
    return ResolvedSource(dest, "s3", "s3")


def _from_hub(repo_id: str, revision: str | None, cache_dir: Path, token: str | None) -> ResolvedSource:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError

    try:
        # HF_ENDPOINT is read per call (not at import), so a mirror set for one run is honoured.
        path = snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=str(cache_dir / "hub"),
            token=token or False,
            endpoint=os.environ.get("HF_ENDPOINT") or None,
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
    resolved = Path(path)
    return ResolvedSource(resolved, revision or resolved.name, "hub")


def resolve_source(
    source: str,
    *,
    revision: str | None = None,
    cache_dir: Path,
    aws_conn_id: str | None = "aws_default",
    hf_token: str | None = None,
) -> ResolvedSource:
    """Map ``source`` to a local folder (downloading when remote) and check it holds a model."""
    source = source.strip()
    if not source:
        raise ModelSourceError("'model_source' is empty: give a local path, an s3:// prefix or a hub repo id.")
    if source.startswith("s3://"):
        resolved = _from_s3(source, cache_dir, aws_conn_id)
    elif source.startswith("hf://"):
        resolved = _from_hub(source[5:], revision, cache_dir, hf_token)
    elif source.startswith("file://") or source.startswith(("/", ".", "~")) or Path(source).exists():
        path = Path(source.removeprefix("file://")).expanduser().resolve()
        resolved = ResolvedSource(path, revision or "local", "local")
    elif HUB_REPO_RE.match(source):
        resolved = _from_hub(source, revision, cache_dir, hf_token)
    else:
        raise ModelSourceError(
            f"Cannot tell what kind of model source {source!r} is: use an existing local path, "
            "file://PATH, s3://bucket/prefix, or a hub repo id like org/name."
        )
    check_model_dir(resolved.path, source)
    return resolved
