"""Benchmarking an OpenAI-compatible endpoint: load generator, metrics, cost, SLO gates and reports.

Only the standard library and httpx are imported by these modules; matplotlib is imported lazily
by :mod:`raylift.bench.report`, so DAG files may import anything here.
"""
