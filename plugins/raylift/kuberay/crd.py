"""Validate manifests against the KubeRay CRD's own OpenAPI v3 schema (read, never copied).

The CRD lives outside the project (``RAYLIFT_KUBERAY_CRDS``, else ``<repo>/../shared/reference/kuberay``).
OpenAPI v3 structural schemas are close to JSON Schema; the differences handled here:

- ``x-kubernetes-int-or-string``: int or string (controller-gen also emits ``anyOf``; added if missing);
- ``x-kubernetes-preserve-unknown-fields``: any extra keys allowed; everywhere else unknown fields are
  refused, as the API server does with ``fieldValidation=Strict`` (kubectl's default), so a typo fails
  here rather than being silently pruned;
- ``nullable``: null allowed; other ``x-kubernetes-*`` keys (list types, CEL rules) are server-side only.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from raylift.errors import ManifestValidationError, RayliftValueError


class CrdNotFoundError(RayliftValueError):
    """The KubeRay CRD file needed for validation is not where raylift looks for it."""


def crds_dir() -> Path:
    """``RAYLIFT_KUBERAY_CRDS``, else ``<repo_root>/../shared/reference/kuberay``."""
    from raylift.config import repo_root

    env = os.environ.get("RAYLIFT_KUBERAY_CRDS")
    return Path(env).expanduser() if env else repo_root().parent / "shared" / "reference" / "kuberay"


def crd_schema(plural: str = "rayservices", version: str = "v1") -> dict[str, Any]:
    """``spec.versions[name=version].schema.openAPIV3Schema`` of ``ray.io_<plural>.yaml`` as JSON Schema."""
    return _load_schema(str(crds_dir() / f"ray.io_{plural}.yaml"), version)


@functools.lru_cache(maxsize=4)
def _load_schema(path: str, version: str) -> dict[str, Any]:
    import yaml

    if not Path(path).is_file():
        raise CrdNotFoundError(
            f"KubeRay CRD not found at {path}; set RAYLIFT_KUBERAY_CRDS to the folder holding ray.io_*.yaml."
        )
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path, encoding="utf-8") as f:
        crd = yaml.load(f, Loader=loader)  # noqa: S506 - a safe loader either way
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return _to_json_schema(entry["schema"]["openAPIV3Schema"])
    raise CrdNotFoundError(f"{path} has no version {version!r}.")


def _to_json_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _to_json_schema(value) for key, value in node.items() if not key.startswith("x-kubernetes-")}
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def json_path(parts: Any) -> str:
    """``['spec', 'workerGroupSpecs', 0, 'replicas']`` -> ``$.spec.workerGroupSpecs[0].replicas``."""
    text = "$"
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def validate(manifest: dict[str, Any], *, plural: str = "rayservices", version: str = "v1") -> None:
    """Raise ``ManifestValidationError`` naming the first failing JSON path (and how many fail)."""
    import jsonschema

    validator = jsonschema.Draft7Validator(crd_schema(plural, version))
    errors = sorted(
        validator.iter_errors(manifest),
        key=lambda e: (len(e.absolute_path), [str(p) for p in e.absolute_path]),
    )
    if not errors:
        return
    first = errors[0]
    path = json_path(first.absolute_path)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    raise ManifestValidationError(
        f"{manifest.get('kind', 'manifest')} fails the KubeRay {version} CRD at {path}: "
        f"{first.message}{more}. "
        "Fix that field in the profile or the render arguments.",
        path,
    )
