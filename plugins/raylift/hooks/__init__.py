"""Hooks: each talks to one API."""
