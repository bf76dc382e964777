"""Real OpenAI clients against one endpoint, run in the runtime env (it has the official ``openai`` SDK).

    python tests/serve_apps/openai_clients.py BASE_URL MODEL OUT.json

Each client counts its requests and failures (an exception or a wrong answer is a failure), so the
test asserts 0 failed requests per client:
* ``openai_sdk``: chat, stream without and with ``include_usage``, completions, logprobs (chat and
  completions), ``n=2``;
* ``ecs_test_llama``: the ECS write-up's ``test_llama.py`` shape (OpenAI SDK, system + user message,
  ``stream=True``, ``chunk.choices[0].delta.content`` on every chunk);
* ``choices0_loop``: llmperf's OpenAI client loop (raw SSE, ``data["choices"][0]["delta"]`` read on every
  chunk, no ``stream_options``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import httpx
import openai


def run(clients: dict[str, list[Callable[[], Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, calls in clients.items():
        errors = []
        for call in calls:
            try:
                call()
            except Exception as exc:  # any failure counts, with its reason
                errors.append(f"{getattr(call, '__name__', '?')}: {type(exc).__name__}: {exc}"[:400])
        out[name] = {"requests": len(calls), "failed": len(errors), "errors": errors}
    return out


def main(base: str, model: str) -> dict[str, Any]:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0, timeout=120)
    say = [{"role": "user", "content": "Say hello."}]

    def chat() -> None:
        r = client.chat.completions.create(model=model, messages=say, max_tokens=8)
        assert r.choices[0].message.content and r.usage.completion_tokens > 0

    def stream_plain() -> None:
        chunks = list(client.chat.completions.create(model=model, messages=say, max_tokens=8, stream=True))
        assert chunks and all(c.choices for c in chunks) and all(c.usage is None for c in chunks)
        assert "".join(c.choices[0].delta.content or "" for c in chunks)

    def stream_usage() -> None:
        chunks = list(client.chat.completions.create(
            model=model, messages=say, max_tokens=8, stream=True, stream_options={"include_usage": True}))
        assert chunks[-1].usage.completion_tokens > 0 and chunks[-1].choices == []
        assert all(c.choices for c in chunks[:-1])

    def completions() -> None:
        r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=8)
        assert r.choices[0].text and r.usage.completion_tokens > 0

    def completions_stream() -> None:
        chunks = list(client.completions.create(model=model, prompt="Once upon a time", max_tokens=8, stream=True))
        assert all(c.choices for c in chunks) and "".join(c.choices[0].text for c in chunks)

    def chat_logprobs() -> None:
        r = client.chat.completions.create(model=model, messages=say, max_tokens=4, logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        assert len(content) == r.usage.completion_tokens and all(len(t.top_logprobs) == 2 for t in content)

    def completions_logprobs() -> None:
        r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=4, logprobs=2)
        assert len(r.choices[0].logprobs.tokens) == r.usage.completion_tokens

    def n2() -> None:
        r = client.chat.completions.create(model=model, messages=say, max_tokens=4, n=2, temperature=1.0)
        assert sorted(c.index for c in r.choices) == [0, 1]

    def ecs_test_llama() -> None:  # the seed's test_llama.py, as the write-up runs it
        stream = client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is AWS ECS? Provide a short answer"},
            ],
            stream=True,
        )
        # the seed prints chunk.choices[0].delta.content for every chunk; an empty text (the tiny
        # random model may end at once) is an answer, a missing choices[0] is a failure
        pieces = [chunk.choices[0].delta.content or "" for chunk in stream]
        assert pieces

    def choices0_loop() -> None:  # llmperf's OpenAIChatCompletionsClient: choices[0] on every chunk
        body = {"model": model, "messages": say, "max_tokens": 16, "stream": True}
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=120) as resp:
            assert resp.status_code == 200, resp.status_code
            text, chunks = "", 0
            for line in resp.iter_lines():
                line = line.strip()
                if not line or line == "data: [DONE]":
                    continue
                data = json.loads(line.removeprefix("data: "))
                if "error" in data:
                    raise RuntimeError(data["error"])
                delta = data["choices"][0]["delta"]  # llmperf reads it on every chunk
                text += delta.get("content") or ""
                chunks += 1
        assert chunks > 0  # text may be empty: the tiny random model can end at once

    sdk = [chat, stream_plain, stream_usage, completions, completions_stream, chat_logprobs, completions_logprobs, n2]
    return run({"openai_sdk": sdk, "ecs_test_llama": [ecs_test_llama] * 3, "choices0_loop": [choices0_loop] * 8})


if __name__ == "__main__":
    result = main(sys.argv[1], sys.argv[2])
    with open(sys.argv[3], "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v["failed"] for k, v in result.items()}))
