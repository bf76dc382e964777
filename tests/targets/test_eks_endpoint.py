"""Where an Airflow outside the EKS cluster reaches Serve: the smoke test names a cluster-internal endpoint it cannot
resolve (the oracle: this machine's own resolver), and the terraform stack's load balancer output reaches the eks
target's ``endpoint`` through tools/tf_outputs_to_airflow.py."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import pytest

from raylift.errors import SmokeTestError
from raylift.serve.smoke import run_smoke
from raylift.targets import get_target
from raylift.targets.eks import EksTarget
from tests.aws.moto_resources import tool_target_options
from tests.infra.test_tf_outputs_to_airflow import SAMPLE_VALUES

OPTIONS = {"cluster_name": "ray", "worker_nodegroup": "gpu", "bucket": "raylift-models", "region_name": "us-west-2"}


def eks(**extra: object) -> EksTarget:
    target = get_target("eks", **(OPTIONS | extra))
    assert isinstance(target, EksTarget)
    return target


def resolves(host: str) -> bool:
    try:
        socket.getaddrinfo(host, 8000, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return True


def test_the_default_eks_endpoint_is_refused_at_once_with_what_to_set() -> None:
    """No option 'endpoint': the target's URL is KubeRay's serve Service in cluster DNS. Outside the cluster the
    smoke test says so, naming the host and the option and terraform output to set, before any request."""
    url = eks().endpoint_url()
    host = urlsplit(url).hostname or ""
    assert host == "raylift-serve-svc.raylift.svc.cluster.local"
    if resolves(host):
        pytest.skip(f"{host} resolves on this machine (it runs inside a Kubernetes cluster)")
    started = time.monotonic()
    with pytest.raises(SmokeTestError) as failed:
        run_smoke(url, "llama", timeout_s=60.0)
    message = str(failed.value)
    assert f"Cannot resolve {host!r}" in message
    assert "cluster-internal Kubernetes Service name" in message
    assert "eks target option 'endpoint'" in message and "raylift_cluster connection" in message
    assert "eks_serve_endpoint" in message
    assert time.monotonic() - started < 30.0  # one DNS answer, not a connect timeout


def test_a_name_that_does_not_resolve_elsewhere_is_named_without_the_cluster_advice() -> None:
    host = "serve.raylift.invalid"  # RFC 2606: .invalid never resolves
    assert not resolves(host)
    with pytest.raises(SmokeTestError, match=r"Cannot resolve 'serve\.raylift\.invalid' from this Airflow worker") as failed:
        run_smoke(f"http://{host}:8000", "llama")
    assert "cluster-internal" not in str(failed.value)


def test_a_resolvable_host_goes_on_to_the_requests() -> None:
    """127.0.0.1 resolves; nothing listens on the port taken and released here, so the request itself fails."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(SmokeTestError, match=rf"Cannot reach http://127\.0\.0\.1:{port} \(ConnectError"):
        run_smoke(f"http://127.0.0.1:{port}", "llama", timeout_s=5.0)


def test_the_stacks_serve_endpoint_becomes_the_eks_target_endpoint() -> None:
    """terraform output eks_serve_endpoint -> the tool -> target_options['endpoint'] -> the URL the smoke test and the
    benchmark call (no longer cluster DNS)."""
    values = SAMPLE_VALUES["eks"]
    options, _ = tool_target_options({k: v for k, v in values.items() if v is not None})
    assert options["endpoint"] == values["eks_serve_endpoint"]
    target = get_target("eks", **options)
    assert target.endpoint_url() == values["eks_serve_endpoint"]
    assert not (urlsplit(target.endpoint_url()).hostname or "").endswith(".cluster.local")
