"""Check, first in the run, that the cluster's instances can run the Serve config's hardware profile.

The deploy step resolves and checks the profile too (``ServeDeployOperator.hardware_profile``, through the same
``choose_profile``), but it runs after the scale step: a GPU profile named for a CPU-only node group would first
start nodes, and an image build, before being refused. This step runs before the build, the staging and the lease,
applies nothing, and refuses such a run while it costs nothing. Where the target cannot see its instances yet (an
ECS cluster with no task running; ``local`` and ``ray``), it refuses nothing and says so: the deploy step checks
again once the cluster is up.

The profile also names the image (``raylift.aws.images``: GPU, Neuron, Graviton or CPU) the run builds and deploys on
ECS/EKS: this step chooses it (refusing a target option ``image_name`` that cannot run the profile), and the release's
later steps build, roll out and render the image it returned (``TargetOperator.follow_release_image``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from raylift.config import SERVE_APPS_DIR_NAME, repo_root
from raylift.operators.base import TargetOperator

if TYPE_CHECKING:
    from raylift.serve.hardware import InstanceShape


def choose_profile(
    target: Any, serve_config: str, log: Any
) -> tuple[str, dict[str, Any], tuple[InstanceShape, ...]]:
    """The Serve config file a run deploys on ``target``, its contents, and the instances it was chosen for: ``auto`` follows the cluster's instances,
    a named one is checked against them (``HardwareProfileError`` naming the instance, what it has, what the profile
    needs and what to set). Warnings (a CPU profile on accelerated instances) go to ``log`` (the task's logger).
    The target chooses the image that runs it (``target.chosen_image``; ``ImageProfileError`` when the target options
    or the release's image contradict the profile)."""
    from raylift.serve.config import load_config
    from raylift.serve.hardware import check_profile, resolve_profile

    shapes = target.instance_shapes()
    name, auto = resolve_profile(serve_config, shapes)
    name = Path(name).name
    base = load_config(repo_root() / SERVE_APPS_DIR_NAME / "configs" / name)
    where = target.describe_cluster()
    if auto:
        log.info("serve_config auto: %s for %s (%s)", name, where,
                 ", ".join(s.describe() for s in shapes) or "its instances are unknown: the CPU profile")
    for warning in check_profile(name, base, shapes, where=where):
        log.warning("%s", warning)
    known = bool(shapes) or not auto  # auto's pick for unknown instances is a placeholder: it names no image
    image = target.choose_image(name, base, known=known)
    if image:
        log.info("image %s for %s%s", image, name,
                 "" if known else " (the instances are unknown: the target option image_name's, or the default)")
    return name, base, shapes


class HardwareProfileOperator(TargetOperator):
    """Refuse, before anything is built, staged or applied, a Serve config the cluster's instances cannot run.

    :param serve_config: the ``serve_config`` Param: ``auto`` or a file in ``serve_apps/configs``.
    :return: the profile the cluster's instances pick now and what they are (``instances`` empty: not known yet),
        and the image that runs it (``image``; None on targets that run no image), which the release's later
        steps build and deploy."""

    template_fields = (*TargetOperator.template_fields, "serve_config")

    def __init__(self, *, serve_config: str = "auto", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.serve_config = serve_config

    def execute(self, context: Any) -> dict[str, Any]:
        from raylift.config import refuse_removed_params

        dag_run = context.get("dag_run")
        refuse_removed_params(getattr(dag_run, "conf", None))  # the run's first step: before anything is built
        target = self.target_impl
        name, _, shapes = choose_profile(target, str(self.serve_config or ""), self.log)
        instances = [shape.instance_type for shape in shapes]
        if not instances:
            self.log.info("%s: its instances are not known before it scales; the deploy step checks %s again",
                          target.describe_cluster(), name)
        return {"serve_config": name, "cluster": target.describe_cluster(), "instances": instances,
                "image": target.chosen_image}
