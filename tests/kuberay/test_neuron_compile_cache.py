"""The Neuron compile cache has a real volume: the folder the ray-neuron image's NEURON_COMPILE_CACHE_URL names is,
in the inf2 pods, the node's own disk (a hostPath volume), writable by the image's user, outside the read-only
model mount; the manifest validates against the KubeRay CRD. Read from the Dockerfile and the rendered manifest."""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

from raylift.config import repo_root
from raylift.kuberay.profiles import NEURON_COMPILE_CACHE
from tests.fixtures.kuberay_crd import validate
from tests.images.test_dockerfiles import parse_dockerfile, shell_commands
from tests.kuberay.test_manifest import render

DOCKERFILE = repo_root() / "images" / "ray-neuron" / "Dockerfile"
MODEL_MOUNT = "/mnt/models"  # test_manifest.render's hf_home, a read-only PersistentVolumeClaim


def image_env_and_user() -> tuple[dict[str, str], str, list[list[str]]]:
    instructions = parse_dockerfile(DOCKERFILE.read_text())
    env: dict[str, str] = {}
    user = ""
    for ins in instructions:
        if ins.keyword == "ENV":
            env.update(w.split("=", 1) for w in shlex.split(ins.args) if "=" in w)
        elif ins.keyword == "USER":
            user = ins.args.strip()
    return env, user, shell_commands(instructions)


def test_the_inf2_pods_mount_the_nodes_disk_where_the_image_keeps_its_compile_cache() -> None:
    env, user, commands = image_env_and_user()
    cache = env["NEURON_COMPILE_CACHE_URL"]
    assert not PurePosixPath(cache).is_relative_to(MODEL_MOUNT), cache  # the model mount is read-only
    # without the volume (ECS, docker run) the image's own folder is the ray user's
    assert any(c[:1] == ["chown"] and c[1] == user and cache in c for c in commands), (user, commands)

    manifest = render("inf2")
    validate(manifest)
    pod = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == cache]
    assert not mount.get("readOnly")
    assert volumes[mount["name"]]["hostPath"] == {"path": NEURON_COMPILE_CACHE.node_path, "type": "DirectoryOrCreate"}
    assert {e["name"]: e.get("value") for e in container["env"]}["NEURON_COMPILE_CACHE_URL"] == cache
    # kubelet creates a missing hostPath folder root-owned: the init container gives it to the image's user
    (init,) = pod["initContainers"]
    assert init["image"] == container["image"]
    assert f"chown {user} {cache}" in init["command"][-1]
    assert {m["mountPath"] for m in init["volumeMounts"]} == {cache}
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert init["resources"]["requests"] == init["resources"]["limits"]  # the pod stays Guaranteed


def test_only_the_neuron_pods_get_a_node_cache() -> None:
    for profile in ("gpu-vllm", "graviton"):
        cluster = render(profile)["spec"]["rayClusterConfig"]
        pods = [cluster["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
        assert all("initContainers" not in p and all("hostPath" not in v for v in p.get("volumes", [])) for p in pods)
    head = render("inf2")["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert "initContainers" not in head  # the head runs no replica: it compiles nothing
