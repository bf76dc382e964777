"""The staged-model Asset: a model's place in the model store, announced to Airflow's scheduler.

A stage task adds one event to the ``raylift-staged-model`` alias for the Asset whose URI is where the
model now lives (``file:///…/model-store/<model>/<revision>`` or ``s3://bucket/prefix/<model>/<revision>``).
The alias, not a fixed Asset, because the location depends on the run's Params; DAGs scheduled on the
alias (raylift_redeploy) run on events of any model it resolves to. The event's ``extra`` carries what a
deploy needs to find the model again (never the original source: it may hold a presigned URL); its ``uri``
says which model store it was staged in, so a redeploy reaches only the clusters of that store (``staged_in``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from airflow.sdk import Asset, AssetAlias

from raylift.config import STAGED_MODEL_ALIAS
from raylift.records import StagedModel

EXTRA_KEYS = ("model_id", "revision", "uri", "manifest_uri")


def staged_model_alias() -> AssetAlias:
    return AssetAlias(STAGED_MODEL_ALIAS)


def model_asset_uri(location: str) -> str:
    """``s3://…`` as is; a local directory as ``file://`` + its absolute path. No trailing slash."""
    location = location.rstrip("/")
    if "://" in location:
        return location
    return f"file://{location}"


def model_asset(staged: StagedModel) -> Asset:
    return Asset(uri=model_asset_uri(staged.uri))


def staged_model_extra(staged: StagedModel) -> dict[str, str]:
    """The event's extra: the model's name, revision, store location and manifest (no source, no files)."""
    return {key: str(getattr(staged, key)) for key in EXTRA_KEYS}


def staged_models(triggering_events: Mapping[Any, Iterable[Any]] | None) -> list[dict[str, str]]:
    """The staged-model events' extras among the events that started this run, newest first."""
    if not triggering_events:
        return []
    found = [
        event
        for events in triggering_events.values()
        for event in events
        if all(key in (event.extra or {}) for key in EXTRA_KEYS)
    ]
    found.sort(key=lambda event: event.timestamp, reverse=True)
    return [{key: str(event.extra[key]) for key in EXTRA_KEYS} for event in found]


def staged_in(location: str, store_uri: str) -> bool:
    """Whether a staged model's ``location`` lies in the model store ``store_uri`` (a folder or ``s3://`` prefix),
    compared as Asset URIs (a local folder resolved, as the store resolves it)."""

    def normal(uri: str) -> str:
        uri = uri.removeprefix("file://") if uri.startswith("file:///") else uri
        if "://" not in uri:
            uri = str(Path(uri).expanduser().resolve())
        return model_asset_uri(uri)

    inner, root = normal(location), normal(store_uri)
    return inner == root or inner.startswith(root.rstrip("/") + "/")


def latest_staged_model(
    triggering_events: Mapping[Any, Iterable[Any]] | None, store_uri: str | None = None
) -> dict[str, str] | None:
    """The newest staged-model event's extra among the events that started this run (with ``store_uri``: the
    newest staged in that model store), if any."""
    models = staged_models(triggering_events)
    if store_uri is not None:
        models = [m for m in models if staged_in(m["uri"], store_uri)]
    return models[0] if models else None
