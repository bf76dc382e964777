"""How many ``neuron_cores`` Ray has on a KubeRay pod, as the AWS-shaped Ray fixture declares them
(``tests.fixtures.aws_shaped_ray.neuron_cores``): KubeRay v1.7.0 maps ``aws.amazon.com/neuroncore`` only
(``common/pod.go``, ``customAcceleratorToRayResourceMap``); whole devices (``aws.amazon.com/neuron``) are counted by
Ray's own detection, each device's cores from EC2's data (inf2.48xlarge: 12 devices, 24 NeuronCores)."""

from __future__ import annotations

from types import SimpleNamespace

import kubernetes.utils.quantity  # noqa: F401 - at collection: urllib3's first import probes IPv6 with a socket

from tests.fixtures.aws_shaped_ray import neuron_cores

INF2_48XLARGE = SimpleNamespace(neuron_devices=12, neuron_cores=24)


def test_kuberay_maps_neuroncore_limits_to_neuron_cores_one_to_one() -> None:
    assert neuron_cores({"aws.amazon.com/neuroncore": "8"}, INF2_48XLARGE) == 8
    assert neuron_cores({"aws.amazon.com/neuroncore": "8"}, None) == 8  # KubeRay needs no instance data


def test_devices_count_the_cores_ray_detects_on_them() -> None:
    assert neuron_cores({"aws.amazon.com/neuron": "4"}, INF2_48XLARGE) == 8
    assert neuron_cores({"aws.amazon.com/neuron": "4"}, None) == 0  # nothing known of the device: nothing declared


def test_no_neuron_resource_no_neuron_cores() -> None:
    assert neuron_cores({"cpu": "60", "aws.amazon.com/neurondevice": "4"}, INF2_48XLARGE) == 0
