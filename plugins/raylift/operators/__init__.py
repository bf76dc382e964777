"""Operators: each composes hooks/targets into one user-visible pipeline step."""
