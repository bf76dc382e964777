"""The Gateway API half of an EKS blue/green release: the Kubernetes API stand-in extended with Gateways and
HTTPRoutes, and Envoy Gateway's status for them, as its source and the Gateway API spec define it.

Served (beside ``tests.fixtures.kube_rayclusters``'s RayServices, RayClusters, pods and Jobs):

- ``GET    /apis/gateway.networking.k8s.io/v1/namespaces/{ns}/gateways/{name}`` and ``.../httproutes/{name}``
  (404 Status when absent);
- ``PATCH  .../httproutes/{name}`` as server-side apply (``application/apply-patch+yaml``, ``fieldManager``,
  ``force``): creates, or replaces what the manager applied, keeping ``status``;
- ``DELETE .../httproutes/{name}``.

``EnvoyGateway`` plays the controller (``gateway.envoyproxy.io/gatewayclass-controller``), as Envoy Gateway's
``internal/gatewayapi/status/gateway.go`` writes a Gateway's status: ``Accepted`` when its GatewayClass is one the
controller owns (``UpdateGatewayStatusAccepted``); ``status.addresses`` from the Envoy LoadBalancer Service's
``status.loadBalancer.ingress`` and ``Programmed`` True only with an address, else False with reason
``AddressNotAssigned`` (``UpdateGatewayStatusProgrammedCondition``). Which controller gives that Service an address
is the stack's choice: ``load_balancer`` is the NLB hostname the AWS Load Balancer Controller writes when the
Service has ``spec.loadBalancerClass: service.k8s.aws/nlb`` (what terraform's EnvoyProxy asks for), or None for the
stack before it (the webhook off, no class: only the in-tree controller would act, and this model gives no address,
as an EKS cluster whose subnets lack the ELB role tags leaves it pending). An HTTPRoute's ``status.parents`` entry
gets ``Accepted`` when its parent Gateway is accepted and ``ResolvedRefs`` when every backend Service exists
(Gateway API v1 ``RouteConditionAccepted``/``RouteConditionResolvedRefs``, reason ``BackendNotFound`` otherwise).

``route(url)`` answers where the data plane would send a request, by the Gateway API v1 HTTPRoute rules Envoy
Gateway implements: the listener's port, then the longest ``PathPrefix`` match over the attached routes, a
``URLRewrite`` filter's ``ReplacePrefixMatch``, and the weighted backends (a zero-weight backend gets nothing).
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.fixtures.kube_api import _reply, _status, point_kubernetes_default, running_standin
from tests.fixtures.kube_rayclusters import KubeRayClustersStandIn

GATEWAY_API = "gateway.networking.k8s.io/v1"
CONTROLLER = "gateway.envoyproxy.io/gatewayclass-controller"
_OBJECT = re.compile(r"^/apis/gateway\.networking\.k8s\.io/v1/namespaces/(?P<ns>[a-z0-9-]+)/"
                     r"(?P<plural>gateways|httproutes)/(?P<name>[a-z0-9.-]+)$")


class KubeGatewayStandIn(KubeRayClustersStandIn):
    def __init__(self, token: str) -> None:
        super().__init__(token)
        self.gateways: dict[tuple[str, str], dict[str, Any]] = {}
        self.httproutes: dict[tuple[str, str], dict[str, Any]] = {}

    def _dispatch(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(handler.path)
        found = _OBJECT.match(parts.path)
        if found is None:
            return super()._dispatch(handler, method)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        self.requests.append((method, handler.path, handler.headers.get("Content-Type")))
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            return _reply(handler, 401, _status(401, "Unauthorized", "missing or wrong bearer token"))
        key, plural = (found["ns"], found["name"]), found["plural"]
        store = self.gateways if plural == "gateways" else self.httproutes
        with self._lock:
            if method == "GET":
                if key not in store:
                    return _reply(handler, 404, _status(404, "NotFound", f'{plural}.gateway.networking.k8s.io '
                                                                         f'"{key[1]}" not found'))
                return _reply(handler, 200, copy.deepcopy(store[key]))
            if plural != "httproutes":
                return _reply(handler, 405, _status(405, "MethodNotAllowed", f"{method} {plural}: KubeRay owns it"))
            if method == "DELETE":
                if store.pop(key, None) is None:
                    return _reply(handler, 404, _status(404, "NotFound", f'httproutes "{key[1]}" not found'))
                return _reply(handler, 200, _status(200, "Success", "deleted"))
            if method != "PATCH":
                return _reply(handler, 405, _status(405, "MethodNotAllowed", method))
            query = parse_qs(parts.query)
            if handler.headers.get("Content-Type") != "application/apply-patch+yaml":
                return _reply(handler, 415, _status(415, "UnsupportedMediaType", "server-side apply only"))
            if not query.get("fieldManager"):
                return _reply(handler, 422, _status(422, "Invalid", "fieldManager is required for apply requests"))
            applied = json.loads(body)
            problem = _httproute_problem(applied, key)
            if problem:
                return _reply(handler, 422, _status(422, "Invalid", problem))
            before = store.get(key)
            obj = {**applied, "metadata": {**applied["metadata"], "resourceVersion": str(time.monotonic_ns())}}
            if before is not None:
                obj["status"] = before.get("status", {})
            store[key] = obj
            return _reply(handler, 200 if before else 201, copy.deepcopy(obj))


def _httproute_problem(obj: dict[str, Any], key: tuple[str, str]) -> str:
    """What the API server would refuse in an HTTPRoute (the CRD's required fields and enums raylift uses)."""
    meta = obj.get("metadata") or {}
    if obj.get("apiVersion") != GATEWAY_API or obj.get("kind") != "HTTPRoute":
        return "apiVersion/kind: expected gateway.networking.k8s.io/v1 HTTPRoute"
    if (meta.get("namespace"), meta.get("name")) != key:
        return "metadata.name/namespace do not match the request path"
    if len(meta["name"]) > 253:
        return "metadata.name: longer than 253 characters"
    spec = obj.get("spec") or {}
    if not spec.get("parentRefs"):
        return "spec.parentRefs: Required value"
    for rule in spec.get("rules") or []:
        for match in rule.get("matches") or []:
            path = match.get("path") or {}
            if path.get("type") not in (None, "Exact", "PathPrefix", "RegularExpression"):
                return f"spec.rules.matches.path.type: Unsupported value {path.get('type')!r}"
        for f in rule.get("filters") or []:
            if f.get("type") == "URLRewrite" and (f.get("urlRewrite") or {}).get("path", {}).get("type") not in (
                    "ReplaceFullPath", "ReplacePrefixMatch"):
                return "spec.rules.filters.urlRewrite.path.type: Unsupported value"
        for ref in rule.get("backendRefs") or []:
            if not ref.get("name") or not isinstance(ref.get("port"), int):
                return "spec.rules.backendRefs: name and port are required for a Service backend"
    return ""


def _condition(kind: str, ok: bool, reason: str, message: str, generation: int) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "observedGeneration": generation, "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ")}


class EnvoyGateway:
    """Envoy Gateway's status writes for the Gateways and HTTPRoutes in ``kube`` (see the module docstring).

    ``gateway_classes``: the GatewayClasses whose ``controllerName`` is Envoy Gateway's. ``load_balancer``: the
    hostname the Envoy Service's load balancer gets (None: no controller gives it one). ``services``: the names of
    the Services that exist in a namespace (KubeRay's per-cluster ``<cluster>-serve-svc``)."""

    def __init__(self, kube: KubeGatewayStandIn, *, gateway_classes: tuple[str, ...] = ("eg",),
                 load_balancer: str | None, services: Callable[[str], set[str]]) -> None:
        self.kube, self.gateway_classes, self.load_balancer, self.services = (
            kube, gateway_classes, load_balancer, services)

    def reconcile(self) -> None:
        for gw in self.kube.gateways.values():
            generation = int(gw["metadata"].get("generation", 1))
            accepted = gw["spec"].get("gatewayClassName") in self.gateway_classes
            if not accepted:
                continue  # a class no controller owns: the CRD's defaults (Unknown, "Waiting for controller") stay
            status: dict[str, Any] = {"conditions": [
                _condition("Accepted", True, "Accepted", "The Gateway has been scheduled by Envoy Gateway",
                           generation)]}
            if self.load_balancer:
                status["addresses"] = [{"type": "Hostname", "value": self.load_balancer}]
                status["conditions"].append(_condition("Programmed", True, "Programmed",
                                                       "Address assigned to the Gateway", generation))
            else:
                status["conditions"].append(_condition("Programmed", False, "AddressNotAssigned",
                                                       "No addresses have been assigned to the Gateway", generation))
            gw["status"] = status
        for (ns, _), route in self.kube.httproutes.items():
            parents = []
            for ref in route["spec"].get("parentRefs") or []:
                parent = self.kube.gateways.get((ref.get("namespace") or ns, ref["name"]))
                if parent is None or parent["spec"].get("gatewayClassName") not in self.gateway_classes:
                    continue  # no controller of ours writes a parent status for it
                missing = sorted({b["name"] for r in route["spec"].get("rules") or [] for b in r.get("backendRefs")
                                  or []} - self.services(ns))
                generation = int(route["metadata"].get("generation", 1))
                parents.append({"parentRef": {"name": ref["name"], "namespace": ref.get("namespace") or ns},
                                "controllerName": CONTROLLER, "conditions": [
                                    _condition("Accepted", True, "Accepted", "Route is accepted", generation),
                                    _condition("ResolvedRefs", not missing, "ResolvedRefs" if not missing else
                                               "BackendNotFound", f"missing Services {missing}" if missing else
                                               "Resolved all the Object references for the Route", generation)]})
            route["status"] = {"parents": parents}

    def route(self, url: str) -> tuple[str, str]:
        """(the backend Service, the path it receives) for a request to ``url`` through a Gateway of this
        controller; LookupError when nothing routes it (no Gateway at that address and port, no matching rule,
        or only zero-weight backends)."""
        parts = urlsplit(url)
        port = parts.port or 80
        best: tuple[int, dict[str, Any], str] | None = None
        for (ns, name), gw in self.kube.gateways.items():
            addresses = [a["value"] for a in (gw.get("status") or {}).get("addresses") or []]
            if parts.hostname not in addresses or port not in [lst["port"] for lst in gw["spec"]["listeners"]]:
                continue
            for route in self.kube.httproutes.values():
                if not any(r["name"] == name and (r.get("namespace") or route["metadata"]["namespace"]) == ns
                           for r in route["spec"]["parentRefs"]):
                    continue
                for rule in route["spec"].get("rules") or []:
                    for match in rule.get("matches") or [{"path": {"type": "PathPrefix", "value": "/"}}]:
                        prefix = match["path"]["value"]
                        if _prefix_matches(prefix, parts.path) and (best is None or len(prefix) > best[0]):
                            best = (len(prefix), rule, prefix)
        if best is None:
            raise LookupError(f"no Gateway route for {url}")
        _, rule, prefix = best
        path = parts.path
        for f in rule.get("filters") or []:
            rewrite = (f.get("urlRewrite") or {}).get("path") or {}
            if f.get("type") == "URLRewrite" and rewrite.get("type") == "ReplacePrefixMatch":
                rest = path[len(prefix.rstrip("/")):]
                path = rewrite["replacePrefixMatch"].rstrip("/") + rest if rest else rewrite["replacePrefixMatch"]
                path = path if path.startswith("/") else "/" + path
        backends = [b for b in rule.get("backendRefs") or [] if int(b.get("weight", 1)) > 0]
        if not backends:
            raise LookupError(f"{url}: the matching rule has no backend with a weight above 0")
        heaviest = max(backends, key=lambda b: int(b.get("weight", 1)))
        return str(heaviest["name"]), path


def _prefix_matches(prefix: str, path: str) -> bool:
    """Gateway API ``PathPrefix``: element-wise, ``/abc`` matches ``/abc`` and ``/abc/x`` but not ``/abcd``."""
    prefix = prefix.rstrip("/")
    return not prefix or path == prefix or path.startswith(prefix + "/")


@contextmanager
def kube_gateway_standin(token: str = "raylift-test-token") -> Iterator[KubeGatewayStandIn]:
    with running_standin(KubeGatewayStandIn, token) as server:
        yield server


@pytest.fixture()
def kube_gateway(monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeGatewayStandIn]:
    """The stand-in, with ``kubernetes_default`` pointing at it (kubeconfig in the connection extra)."""
    with kube_gateway_standin() as server:
        point_kubernetes_default(monkeypatch, server, "raylift")
        yield server
