"""README's seed quick starts (issue 55, item 8) are pasteable as written: S4 (seed 004, llmperf on inf2) and S1
(seed 001, Graviton against x86). Each trigger's conf is read out of the markdown and validated against
raylift_deploy's Params as Airflow validates a trigger's conf; the connection it names is added by the section's
own commands, for a node group the EKS example has (terraform/modules/eks_ray's node_groups) and a KubeRay profile
that resizes that group; the Serve config named runs on that group's CPU architecture and hardware. Running them
needs the AWS stack: not done here (tests/aws/test_docs_confs.py runs docs/infrastructure.md's confs against moto)."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from raylift.kuberay.profiles import PROFILES
from raylift.serve.hardware import profile_needs
from tests.aws.test_docs_confs import eks_node_groups

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = {"S4": "### The Inferentia2 write-up's llmperf run, from a trigger",
            "S1": "### The Graviton write-up's comparison with x86, one pool after the other"}
TRIGGER = re.compile(r'airflow dags trigger raylift_deploy --conf "\$\(cat <<JSON\n(.*?)\nJSON\n\)"', re.S)
ARCH = {"amd64": "x86_64", "arm64": "arm64"}


def section(name: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTIONS[name])
    return text[start:re.compile(r"\n##+ ").search(text, start + 1).end()]


def connections(text: str) -> dict[str, dict[str, str]]:
    """conn id -> the node group the tool was given and the profile the jq merge sets, from the section's commands
    (one connection, or a ``for pool in group:profile ...`` loop over them)."""
    loop = re.search(r"for pool in ([^;]+); do", text)
    if loop:
        return {f"raylift-eks-{pair.split(':')[0]}": {"nodegroup": pair.split(":")[0], "profile": pair.split(":")[1]}
                for pair in loop[1].split()}
    group = re.search(r"--nodegroup (\S+)", text)
    conn = re.search(r"airflow connections add (\S+) --conn-type raylift_cluster", text)
    profile = re.search(r'"profile": "([^"]+)"', text)
    assert group and conn and profile, "the section adds no raylift_cluster connection for a node group and profile"
    return {conn[1]: {"nodegroup": group[1], "profile": profile[1]}}


def deploy_params() -> Any:
    sys.path.insert(0, str(ROOT / "dags"))
    import raylift_deploy

    return raylift_deploy.dag.params


@pytest.mark.parametrize("seed", ["S4", "S1"])
def test_the_seed_quick_start_is_pasteable(seed: str) -> None:
    text = section(seed)
    confs = [json.loads(block) for block in TRIGGER.findall(text)]
    assert confs, f"README's {seed} section triggers no raylift_deploy run"
    added = connections(text)
    groups = eks_node_groups()
    for conf in confs:
        params = copy.deepcopy(deploy_params())
        params.update(conf)  # Airflow's check of a trigger's conf against the Params
        params.validate()
        assert conf.get("model_source"), f"{seed}: no model source: {conf}"
        where = added.get(conf["cluster_conn_id"])
        assert where, f"{seed} names {conf['cluster_conn_id']}, which its commands never add ({sorted(added)})"
        assert where["nodegroup"] in groups, f"the EKS example has no node group {where['nodegroup']!r}"
        profile = PROFILES[where["profile"]]
        assert profile.nodegroup == where["nodegroup"], (profile.name, where)
        config_name = conf["serve_config"]
        config = yaml.safe_load((ROOT / "serve_apps/configs" / config_name).read_text())
        needs = profile_needs(config_name, config)
        worker = profile.workers[0].pod
        arch = worker.node_selector.get("kubernetes.io/arch", "amd64")
        assert needs.architecture == ARCH[arch], f"{config_name} runs {needs.architecture}, {profile.name} {arch}"
        assert not needs.gpus, config_name
        for instance in worker.instance_types:
            assert instance in groups[where["nodegroup"]], (instance, groups[where["nodegroup"]])


def test_s1_compares_the_same_load_on_graviton_and_x86() -> None:
    confs = [json.loads(block) for block in TRIGGER.findall(section("S1"))]
    pools = {PROFILES[connections(section("S1"))[c["cluster_conn_id"]]["profile"]].workers[0].pod.node_selector[
        "kubernetes.io/arch"] for c in confs}
    assert pools == {"arm64", "amd64"}
    same = [{k: v for k, v in c.items() if k not in ("cluster_conn_id", "serve_config")} for c in confs]
    assert same[0] == same[1], "the two runs measure different loads"
    graviton, x86 = (yaml.safe_load((ROOT / "serve_apps/configs" / c["serve_config"]).read_text()) for c in confs)
    assert graviton["applications"][0]["args"] == x86["applications"][0]["args"]  # same app, engine settings
    assert graviton["applications"][0]["deployments"] == x86["applications"][0]["deployments"]
