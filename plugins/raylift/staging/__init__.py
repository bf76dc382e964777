"""Model staging: copy a model from its source into the model store, verified by a manifest."""

from raylift.manifest import Manifest, file_entry
from raylift.staging.stage import stage_model

__all__ = ["Manifest", "file_entry", "stage_model"]
