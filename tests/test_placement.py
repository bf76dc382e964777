"""raylift.serve.placement: which arm of a canary Ray's placement favours, read from Serve's applications status."""

from __future__ import annotations

from typing import Any

from raylift.serve.placement import arm_placement, arms_placement, uses_accelerators


def status(**apps: list[str]) -> dict[str, Any]:
    """Serve's ``applications`` status with one deployment per app, one RUNNING replica per node id given."""
    return {name: {"deployments": {"LLMServer": {"replicas": [{"node_id": n, "state": "RUNNING"} for n in nodes]}}}
            for name, nodes in apps.items()}


def test_arms_on_one_node_are_alike() -> None:
    placed = arms_placement(status(llm=["n1"], **{"llm-canary": ["n2"], "llm-baseline": ["n2"]}),
                            "llm-canary", "llm-baseline")
    assert placed is not None and placed.favoured is None
    assert placed.candidate.neighbours == placed.baseline.neighbours == 1


def test_the_arm_alone_on_its_node_is_favoured() -> None:
    """Session 32's killed run: the canary alone on its node, its baseline beside the serving app."""
    placed = arms_placement(status(llm=["n1"], **{"llm-canary": ["n2"], "llm-baseline": ["n1"]}),
                            "llm-canary", "llm-baseline")
    assert placed is not None and placed.favoured == "candidate"
    assert "0 other" in placed.describe() and "1 other" in placed.describe()
    flipped = arms_placement(status(llm=["n1"], **{"llm-canary": ["n1"], "llm-baseline": ["n2"]}),
                             "llm-canary", "llm-baseline")
    assert flipped is not None and flipped.favoured == "baseline"


def test_a_serving_arm_of_several_replicas_counts_the_mean_and_only_running_ones() -> None:
    apps = status(llm=["n1", "n1", "n2"], **{"llm-canary": ["n3"]})
    apps["llm"]["deployments"]["LLMServer"]["replicas"].append({"node_id": "n3", "state": "STOPPING"})
    serving = arm_placement(apps, "llm")
    assert serving is not None and serving.nodes == ("n1", "n2") and serving.neighbours == 2 / 3
    placed = arms_placement(apps, "llm-canary", "llm")
    assert placed is not None and placed.candidate.neighbours == 0 and placed.favoured == "candidate"
    assert arms_placement(apps, "llm-canary", "gone") is None


def test_accelerator_arms_are_not_compared() -> None:
    def app(options: dict[str, Any]) -> dict[str, Any]:
        return {"name": "llm", "import_path": "x:app",
                "deployments": [{"name": "LLMServer", "num_replicas": 1, "ray_actor_options": options}]}

    assert not uses_accelerators([app({"num_cpus": 1})])
    assert uses_accelerators([app({"num_cpus": 1}), app({"num_gpus": 1})])
    assert uses_accelerators([app({"resources": {"neuron_cores": 2}})])
