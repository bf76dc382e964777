"""A home's two local clusters, blue and green, and which one serves: what a local blue/green release switches.

A runtime-env change (another runtime Python, e.g. one with a moved pin) cannot be given to a running Ray
cluster: every node and worker runs the Python it was started with. So the release starts the other colour's
cluster from the new runtime beside the serving one, judges the candidate there, and switches raylift's front
(:mod:`raylift.local.front`) to it. Green lives in its own folder (``<home>/cluster-green``) on its own ports
(each of blue's + :data:`GREEN_PORT_OFFSET`); both share the home's model store, artifacts and checks. Which colour
serves is ``<home>/blue_green.json``; without it, blue.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from raylift.config import DIRECT_INGRESS_PORTS, LocalSettings
from raylift.local.cluster import LocalRayCluster

COLOURS = ("blue", "green")
#: green's ports are blue's plus this (Serve, GCS, dashboard, client server, dashboard agents; HAProxy's stats,
#: metrics and fallback ports follow the Serve port), so a stack's two clusters never share one
GREEN_PORT_OFFSET = 30
RECORD = "blue_green.json"


def other(colour: str) -> str:
    return COLOURS[1 - COLOURS.index(colour)]


def colour_settings(base: LocalSettings, colour: str, runtime_python: Path) -> LocalSettings:
    """``base`` for the ``colour`` cluster running ``runtime_python``."""
    if colour == "blue":
        return replace(base, runtime_python=runtime_python)
    o = GREEN_PORT_OFFSET
    return replace(
        base, cluster_name="cluster-green", runtime_python=runtime_python,
        gcs_port=base.gcs_port + o, dashboard_port=base.dashboard_port + o, serve_port=base.serve_port + o,
        client_server_port=base.client_server_port + o, agent_port_base=base.agent_port_base + o,
        haproxy_stats_port_setting=base.haproxy_stats_port_setting + o if base.haproxy_stats_port_setting else None,
        haproxy_metrics_port_setting=(base.haproxy_metrics_port_setting + o
                                      if base.haproxy_metrics_port_setting else None),
        direct_ingress_port_setting=(base.direct_ingress_port_setting + DIRECT_INGRESS_PORTS
                                     if base.direct_ingress_port_setting else None),
    )


class LocalColours:
    """Which of ``base.home``'s clusters serves, and each one's settings (its running runtime, else ``requested``)."""

    def __init__(self, base: LocalSettings, requested: Path) -> None:
        self.base, self.requested = base, requested
        self.record_file = base.home / RECORD

    def active(self) -> str:
        if not self.record_file.is_file():
            return "blue"
        colour = str(json.loads(self.record_file.read_text()).get("active", "blue"))
        return colour if colour in COLOURS else "blue"

    def set_active(self, colour: str) -> None:
        self.record_file.parent.mkdir(parents=True, exist_ok=True)
        partial = self.record_file.with_suffix(".tmp")
        partial.write_text(json.dumps({"active": colour}))
        partial.replace(self.record_file)

    def settings(self, colour: str) -> LocalSettings:
        """The ``colour`` cluster's settings: on the runtime its head runs, or (none running) the requested one."""
        running = LocalRayCluster(colour_settings(self.base, colour, self.requested)).running_runtime()
        return colour_settings(self.base, colour, running or self.requested)

    def ports(self) -> dict[str, int]:
        return {colour: colour_settings(self.base, colour, self.requested).serve_port for colour in COLOURS}
