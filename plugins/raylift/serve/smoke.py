"""Smoke tests: the few calls that prove an app really serves its model, one set per app kind.

* ``llm`` (vLLM): ``/v1/models`` lists the served name, a chat completion with usage, a streamed
  completion (``/v1/completions``) with text chunks and usage.
* ``llamacpp``: the same models + chat checks, and a streamed *chat* completion (the Graviton seed's
  clients use ``/v1/chat/completions``).
* ``translator``: the ECS seed's client contract: ``POST`` a JSON string, get non-empty text back.

Each raises SmokeTestError naming the failing check, and sends at most three requests. Before any request the
endpoint's host must resolve from this worker: a Kubernetes Service name (``*.svc.cluster.local``, the eks target's
default endpoint) resolves only inside its cluster, so an Airflow outside it (MWAA, ECS) fails at once, told what
to set, instead of after a connect timeout.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from raylift.errors import SmokeTestError

TRANSLATOR_SAMPLE = "Hello ECS!"  # the seed's example input


def _post(client: httpx.Client, url: str, body: Any) -> dict[str, Any]:
    resp = client.post(url, json=body)
    if resp.status_code != 200:
        raise SmokeTestError(f"POST {url} answered {resp.status_code}: {resp.text[:300]}")
    return resp.json()


# Serve reports an app RUNNING before its HAProxy ingress has reloaded with the app's route: a new app's first
# request may meet the app at "/" (a 404 of its own) for a moment. Its routes are waited for this long.
ROUTE_WAIT_S = 30.0


def _routed_get(client: httpx.Client, url: str) -> httpx.Response:
    """GET ``url``, again while it answers 404 (the route not in the ingress yet), up to ``ROUTE_WAIT_S``."""
    from tenacity import retry, retry_if_result, stop_after_delay, wait_fixed

    def last(state: Any) -> httpx.Response:
        return state.outcome.result()

    get = retry(retry=retry_if_result(lambda r: r.status_code == 404), stop=stop_after_delay(ROUTE_WAIT_S),
                wait=wait_fixed(1.0), retry_error_callback=last)(client.get)
    return get(url)


def _models(client: httpx.Client, base: str, served_name: str) -> list[str]:
    models = _routed_get(client, f"{base}/v1/models")
    if models.status_code != 200:
        raise SmokeTestError(f"GET {base}/v1/models answered {models.status_code}: {models.text[:300]}")
    ids = [m.get("id") for m in models.json().get("data", [])]
    if served_name not in ids:
        raise SmokeTestError(f"/v1/models lists {ids}, not the served name {served_name!r}.")
    return ids


def _chat(client: httpx.Client, base: str, served_name: str, max_tokens: int) -> dict[str, Any]:
    chat = _post(
        client,
        f"{base}/v1/chat/completions",
        {
            "model": served_name,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": max_tokens,
        },
    )
    text = (chat.get("choices") or [{}])[0].get("message", {}).get("content") or ""
    usage = chat.get("usage") or {}
    if not text.strip():
        raise SmokeTestError("The chat completion returned empty text.")
    if not usage.get("completion_tokens") or not usage.get("prompt_tokens"):
        raise SmokeTestError(f"The chat completion has no usage token counts: {usage}.")
    return {"text": text[:200], "usage": usage}


def _stream(
    client: httpx.Client, base: str, served_name: str, max_tokens: int, *, chat: bool
) -> dict[str, Any]:
    """One streamed request; text from ``delta.content`` (chat) or ``text`` (completions)."""
    body: dict[str, Any]
    path, body = (
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Once upon a time"}]})
        if chat
        else ("/v1/completions", {"prompt": "Once upon a time"})
    )
    body |= {
        "model": served_name,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    what = "streaming chat completion" if chat else "streaming completion"
    chunks, texts, usage, first_token_at = 0, [], None, None
    sent_at = datetime.now(UTC)
    with client.stream("POST", f"{base}{path}", json=body) as resp:
        if resp.status_code != 200:
            raise SmokeTestError(f"The {what} answered {resp.status_code}.")
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if event.get("usage"):
                usage = event["usage"]
            for choice in event.get("choices", []):
                text = (choice.get("delta") or {}).get("content") if chat else choice.get("text")
                if text:
                    first_token_at = first_token_at or datetime.now(UTC)
                    chunks += 1
                    texts.append(text)
    if first_token_at is None or not "".join(texts).strip():
        raise SmokeTestError(f"The {what} sent no text chunks.")
    if not usage or not usage.get("completion_tokens"):
        raise SmokeTestError(f"The {what} sent no usage counts.")
    return {
        "chunks": chunks,
        "text": "".join(texts)[:200],
        "usage": usage,
        "sent_at": sent_at.isoformat(),
        "first_token_at": first_token_at.isoformat(),  # the run record's trigger→first token
        "ttft_s": round((first_token_at - sent_at).total_seconds(), 3),
    }


def _openai(streamed_chat: bool) -> Callable[[httpx.Client, str, str, int], dict[str, Any]]:
    def checks(client: httpx.Client, base: str, served_name: str, max_tokens: int) -> dict[str, Any]:
        models = _models(client, base, served_name)
        # streamed first: its first token is the first any client gets from this version (cold start)
        stream = _stream(client, base, served_name, max_tokens, chat=streamed_chat)
        return {"models": models, "chat": _chat(client, base, served_name, max_tokens), "stream": stream}

    return checks


def _translator(client: httpx.Client, base: str, served_name: str, max_tokens: int) -> dict[str, Any]:
    resp = client.post(f"{base}/", json=TRANSLATOR_SAMPLE)
    if resp.status_code != 200:
        raise SmokeTestError(f"POST {base}/ answered {resp.status_code}: {resp.text[:300]}")
    if not resp.text.strip():
        raise SmokeTestError(f"The translator answered {TRANSLATOR_SAMPLE!r} with empty text.")
    return {
        "translation": {
            "input": TRANSLATOR_SAMPLE,
            "text": resp.text[:200],
            "version": resp.headers.get("x-raylift-app-version", ""),
        }
    }


SMOKE_CHECKS: dict[str, Callable[[httpx.Client, str, str, int], dict[str, Any]]] = {
    "llm": _openai(streamed_chat=False),
    "llamacpp": _openai(streamed_chat=True),
    "translator": _translator,
}


# Kubernetes' cluster DNS zone (kubelet's default --cluster-domain): Service names under it resolve only inside
# the cluster. "<svc>.<ns>.svc" is the same name without the domain.
CLUSTER_DNS_SUFFIXES = (".svc.cluster.local", ".cluster.local", ".svc")


def cluster_internal(host: str) -> bool:
    """True when ``host`` is a Kubernetes cluster DNS name (resolvable only inside its cluster)."""
    return host.lower().rstrip(".").endswith(CLUSTER_DNS_SUFFIXES)


def check_resolvable(base_url: str) -> None:
    """SmokeTestError at once when ``base_url``'s host does not resolve from this worker, naming the host and, for a
    cluster-internal name, what to set instead. A host that resolves (an Airflow inside the cluster) passes."""
    parts = urlsplit(base_url)
    host = parts.hostname
    if not host:
        raise SmokeTestError(f"The endpoint {base_url!r} has no host: give an http(s)://host:port URL.")
    try:
        socket.getaddrinfo(host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        if cluster_internal(host):
            raise SmokeTestError(
                f"Cannot resolve {host!r} from this Airflow worker ({exc}): it is a cluster-internal Kubernetes "
                "Service name, which resolves only inside the EKS cluster, so an Airflow outside it (MWAA, ECS) "
                "cannot reach the endpoint. Set the eks target option 'endpoint' (the extra 'endpoint' of the "
                "cluster's raylift_cluster connection) to an address the workers reach: the terraform stack's "
                "output eks_serve_endpoint (an internal load balancer in front of Serve; "
                "tools/tf_outputs_to_airflow.py puts it in raylift_target_options)."
            ) from None
        raise SmokeTestError(
            f"Cannot resolve {host!r} from this Airflow worker ({exc}): check the endpoint {base_url!r} "
            "(the target option 'endpoint' / 'serve_url') and this worker's DNS."
        ) from None


def run_smoke(
    base_url: str, served_name: str, *, kind: str = "llm", timeout_s: float = 60.0, max_tokens: int = 8
) -> dict[str, Any]:
    """Run the ``kind`` app's checks against ``base_url`` (the app's URL); return what was seen."""
    if kind not in SMOKE_CHECKS:
        raise SmokeTestError(f"No smoke test for app kind {kind!r} (known: {', '.join(SMOKE_CHECKS)}).")
    base = base_url.rstrip("/")
    check_resolvable(base)
    try:
        with httpx.Client(timeout=timeout_s) as client:
            return {
                "endpoint": base,
                "kind": kind,
                **SMOKE_CHECKS[kind](client, base, served_name, max_tokens),
            }
    except httpx.TransportError as exc:
        raise SmokeTestError(f"Cannot reach {base} ({type(exc).__name__}: {exc}).") from None
