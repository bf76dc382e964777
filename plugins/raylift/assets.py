"""The staged-model Asset: a model's place in the model store, announced to Airflow's scheduler.

A stage task adds one event to the ``raylift-staged-model`` alias for the Asset whose URI is where the
model now lives (``file:///…/model-store/<model>/<revision>`` or ``s3://bucket/prefix/<model>/<revision>``).
The alias, not a fixed Asset, because the location depends on the run's Params; DAGs scheduled on the
alias (raylift_redeploy) run on events of any model it resolves to. The event's ``extra`` carries what a
deploy needs to find the model again (never the original source: it may hold a presigned URL).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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


def latest_staged_model(triggering_events: Mapping[Any, Iterable[Any]] | None) -> dict[str, str] | None:
    """The newest staged-model event's extra among the events that started this run, if any."""
    if not triggering_events:
        return None
    found = [
        event
        for events in triggering_events.values()
        for event in events
        if all(key in (event.extra or {}) for key in EXTRA_KEYS)
    ]
    if not found:
        return None
    newest = max(found, key=lambda event: event.timestamp)
    return {key: str(newest.extra[key]) for key in EXTRA_KEYS}
