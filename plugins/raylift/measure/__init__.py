"""Benchmarking an OpenAI-compatible endpoint: load generator, metrics, cost, SLO gates and reports.

Only the standard library is imported by these modules (the load generator has its own HTTP/1.1
client, :mod:`raylift.measure.http1`); matplotlib is imported lazily
by :mod:`raylift.measure.report`, so DAG files may import anything here.
"""
