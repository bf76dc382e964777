"""Prompts sized in the served model's own tokens.

A profile asks for prompts of *n* tokens. Words are one token each only in some vocabularies: 64 words
were 221 tokens on the tiny test model. llmperf and ``vllm bench serve`` size prompts with the model's
tokenizer, so raylift does too, with the tokenizer the server itself uses: the endpoint's
``/tokenize`` and ``/detokenize`` (vLLM's OpenAI server; raylift's LLM app serves vLLM's own). The
Airflow side then needs no tokenizer library, no hub download and no copy of the model.

The prompt text is sized without special tokens. A chat request adds its template around it, so the
server's ``usage.prompt_tokens`` is larger than the target by the template's length (as with llmperf).
Endpoints without ``/tokenize`` (llama.cpp, the stub) keep the word prompts; the result says which.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from raylift.measure.profiles import RequestSpec

log = logging.getLogger(__name__)

# (path, JSON payload) -> (HTTP status, parsed JSON body or None)
PostJson = Callable[[str, dict[str, Any]], Awaitable[tuple[int, Any]]]

WORDS = "words"  # prompt_sizing when the endpoint has no tokenizer to ask
TOKENIZER = "tokenizer"  # prompt_sizing when /tokenize sized every prompt
_MAX_TRIES = 8  # decode -> encode rarely differs by more than a merge or two; each try moves the cut
# Prompts sized at once. Each takes three or more round trips to the endpoint, one after another; one prompt at a
# time, the Compose run's benchmark (the README's trigger) had its first timed requests done 12.2 s after its task
# started, 8.8 s in a run with this (bench/README.md, session 26).
SIZING_CONCURRENCY = 8


class TokenizerError(RuntimeError):
    """The endpoint's tokenizer answered with something other than a token list."""


class EndpointTokenizer:
    """The served model's tokenizer through its endpoint's ``/tokenize`` and ``/detokenize``."""

    def __init__(self, post_json: PostJson, model: str) -> None:
        self._post, self.model = post_json, model

    async def encode(self, text: str) -> list[int]:
        status, body = await self._post("/tokenize", {"model": self.model, "prompt": text,
                                                       "add_special_tokens": False})
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
            raise TokenizerError(f"/tokenize answered HTTP {status}: {json.dumps(body)[:200]}")
        return [int(t) for t in body["tokens"]]

    async def decode(self, tokens: Sequence[int]) -> str:
        status, body = await self._post("/detokenize", {"model": self.model, "tokens": list(tokens)})
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            raise TokenizerError(f"/detokenize answered HTTP {status}: {json.dumps(body)[:200]}")
        return body["prompt"]


async def endpoint_tokenizer(post_json: PostJson, model: str) -> EndpointTokenizer | None:
    """The endpoint's tokenizer when it has one (a probe of both routes), else None (word prompts)."""
    tokenizer = EndpointTokenizer(post_json, model)
    try:
        await tokenizer.decode(await tokenizer.encode("the"))
    except (TokenizerError, OSError, TimeoutError) as exc:
        log.info("the endpoint has no usable /tokenize + /detokenize (%s): prompts stay word-sized", exc)
        return None
    return tokenizer


async def size_prompt(tokenizer: EndpointTokenizer, spec: RequestSpec) -> RequestSpec:
    """``spec`` with a prompt of ``spec.input_tokens`` tokens (±1 where the vocabulary merges across the
    cut) and ``prompt_tokens`` set to the tokenizer's count of the text sent.

    As ``vllm bench serve``'s random dataset does: encode words, cut the token list at the target, decode,
    and encode again; a merge across the cut changes the count, so the cut moves by the difference."""
    target = spec.input_tokens
    text = spec.prompt
    tokens = await tokenizer.encode(text)
    while len(tokens) < target:  # a vocabulary coarser than the words: repeat them (bounded: doubles)
        text = f"{text} {text}"
        tokens = await tokenizer.encode(text)
    best: tuple[str, int] | None = None
    cut, tried = target, set()
    for _ in range(_MAX_TRIES):
        tried.add(cut)
        candidate = await tokenizer.decode(tokens[:cut])
        count = len(await tokenizer.encode(candidate))
        if best is None or abs(count - target) < abs(best[1] - target):
            best = (candidate, count)
        if count == target:
            break
        # move by the difference; where that was tried (a partial character decoded to U+FFFD grows by
        # more than the cut moves), by one token
        step = target - count
        cut = next((c for c in (cut + step, cut + (1 if step > 0 else -1))
                    if 1 <= c <= len(tokens) and c not in tried), 0)
        if not cut:
            break
    assert best is not None
    return replace(spec, prompt=best[0], prompt_tokens=best[1])


async def size_prompts(tokenizer: EndpointTokenizer | None, specs: Sequence[RequestSpec], *,
                       concurrency: int = SIZING_CONCURRENCY) -> list[RequestSpec]:
    """Every spec sized by ``tokenizer``, in order, ``concurrency`` at a time (untimed: before any measured
    request); unchanged (word prompts) when there is none. The first error stops the rest."""
    if tokenizer is None:
        return list(specs)
    slots = asyncio.Semaphore(concurrency)

    async def sized(spec: RequestSpec) -> RequestSpec:
        async with slots:
            return await size_prompt(tokenizer, spec)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(sized(spec)) for spec in specs]
    return [task.result() for task in tasks]
