"""Smoke test of an OpenAI-compatible endpoint: the few calls that prove it really serves the model."""

from __future__ import annotations

import json
from typing import Any

import httpx

from raylift.errors import SmokeTestError


def _post(client: httpx.Client, url: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = client.post(url, json=body)
    if resp.status_code != 200:
        raise SmokeTestError(f"POST {url} answered {resp.status_code}: {resp.text[:300]}")
    return resp.json()


def run_smoke(base_url: str, served_name: str, *, timeout_s: float = 60.0, max_tokens: int = 8) -> dict[str, Any]:
    """Check /v1/models, a chat completion and a streamed completion; return what was seen.

    Raises SmokeTestError naming the failing check. Sends exactly three requests.
    """
    base = base_url.rstrip("/")
    report: dict[str, Any] = {"endpoint": base}
    try:
        with httpx.Client(timeout=timeout_s) as client:
            models = client.get(f"{base}/v1/models")
            if models.status_code != 200:
                raise SmokeTestError(f"GET {base}/v1/models answered {models.status_code}: {models.text[:300]}")
            ids = [m.get("id") for m in models.json().get("data", [])]
            if served_name not in ids:
                raise SmokeTestError(f"/v1/models lists {ids}, not the served name {served_name!r}.")
            report["models"] = ids

            chat = _post(
                client,
                f"{base}/v1/chat/completions",
                {"model": served_name, "messages": [{"role": "user", "content": "Say hello."}],
                 "max_tokens": max_tokens},
            )
            text = (chat.get("choices") or [{}])[0].get("message", {}).get("content") or ""
            usage = chat.get("usage") or {}
            if not text.strip():
                raise SmokeTestError("The chat completion returned empty text.")
            if not usage.get("completion_tokens") or not usage.get("prompt_tokens"):
                raise SmokeTestError(f"The chat completion has no usage token counts: {usage}.")
            report["chat"] = {"text": text[:200], "usage": usage}

            chunks, streamed_text, stream_usage = 0, [], None
            with client.stream(
                "POST",
                f"{base}/v1/completions",
                json={"model": served_name, "prompt": "Once upon a time", "max_tokens": max_tokens,
                      "stream": True, "stream_options": {"include_usage": True}},
            ) as resp:
                if resp.status_code != 200:
                    raise SmokeTestError(f"Streaming completion answered {resp.status_code}.")
                for line in resp.iter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    event = json.loads(line[6:])
                    if event.get("usage"):
                        stream_usage = event["usage"]
                    for choice in event.get("choices", []):
                        if choice.get("text"):
                            chunks += 1
                            streamed_text.append(choice["text"])
            if chunks == 0 or not "".join(streamed_text).strip():
                raise SmokeTestError("The streaming completion sent no text chunks.")
            if not stream_usage or not stream_usage.get("completion_tokens"):
                raise SmokeTestError("The streaming completion sent no usage counts.")
            report["stream"] = {"chunks": chunks, "text": "".join(streamed_text)[:200], "usage": stream_usage}
    except httpx.TransportError as exc:
        raise SmokeTestError(f"Cannot reach {base} ({type(exc).__name__}: {exc}).") from None
    return report
