"""A direct release of a cluster change is judged (issue 57, item 3): on ECS/EKS ``release: direct`` rolls a new
image or ``rayClusterConfig`` in place under an unchanged app entry, which the gate took for a redeploy (no release
to judge) and promoted unjudged. With the deploy step's ``cluster_change`` it is judged against the anchor's
samples like any change. The judges: the stub OpenAI server and the gate's own decision, as in
tests/operators/test_benchmark_gates.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from raylift.errors import GateError
from raylift.release.state import DeploymentState
from tests.bench.conftest import stub  # noqa: F401  (the stub server fixture)
from tests.operators.test_benchmark_gates import (  # noqa: F401
    SLOWER,
    STEADY,
    XComs,
    benchmark,
    direct,
    gate,
    release,
    state,
)


def test_a_direct_image_change_under_the_same_app_config_is_judged_against_the_anchor(
    stub: Callable[..., str], state: DeploymentState,  # noqa: F811
) -> None:
    release(stub(**STEADY), "manual__base")
    slower = stub(**SLOWER)
    changed: dict[str, Any] = {**direct(slower), "cluster_change": "image 1.0 -> 2.0 (3x slower)"}
    xcoms = XComs()
    benchmark(changed, "manual__image", xcoms)
    with pytest.raises(GateError, match="regressed"):
        gate(changed, "manual__image", xcoms)
    decision = xcoms[("gate", "decision")]
    assert not decision["unchanged"] and decision["evidence"]["judgement"] is not None
    assert state.last_good()["run_id"] == "manual__base" and state.anchor()["run_id"] == "manual__base"
