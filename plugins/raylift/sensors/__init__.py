"""Sensors: wait on state."""
