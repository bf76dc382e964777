"""Triggers: deferrable waits (no worker slot held while a deploy or build runs)."""
