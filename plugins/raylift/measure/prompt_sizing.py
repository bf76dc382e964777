"""Prompts sized in the served model's own tokens.

A profile asks for prompts of *n* tokens. Words are one token each only in some vocabularies: 64 words
were 221 tokens on the tiny test model. llmperf and ``vllm bench serve`` size prompts with the model's
tokenizer, so raylift does too, with the tokenizer the server itself uses: the endpoint's
``/tokenize`` and ``/detokenize`` (vLLM's OpenAI server; raylift's LLM app serves vLLM's own). The
Airflow side then needs no tokenizer library, no hub download and no copy of the model.

The prompt text is sized without special tokens. A chat request adds its template around it, so the
server's ``usage.prompt_tokens`` is larger than the target by the template's length (as with llmperf).
Endpoints without ``/tokenize`` (llama.cpp, the stub) keep the word prompts; the result says which.

Every request fits the served context. llmperf draws input and output lengths from normal distributions with no
bound, so at 3072 ± 200 in and 512 ± 20 out against a 4096-token model some of 176 requests (1 to 3) ask more than the
context holds, and vLLM answers it 400 (its input check, ``vllm/renderers/params.py``, and the output budget
``max_model_len - input_length``, ``vllm/entrypoints/serve/utils/api_utils.py``): a failed request that measures
the profile, not the server. vLLM's ``/tokenize`` answers with the context it serves (``TokenizeResponse.max_model_len``,
``vllm/entrypoints/serve/tokenize/protocol.py``) and, given ``messages``, the chat template's tokens
(``TokenizeChatRequest``); a prompt whose target leaves less than its output (and the template) of the context is
cut to what fits, and the log says how many were.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from raylift.errors import RayliftValueError
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
        self.max_model_len: int | None = None  # the served context, as /tokenize reports it (vLLM)
        self.overhead = 0  # tokens the server adds around a prompt (a chat template, BOS): probed once

    async def encode(self, text: str) -> list[int]:
        status, body = await self._post("/tokenize", {"model": self.model, "prompt": text,
                                                       "add_special_tokens": False})
        if status != 200 or not isinstance(body, dict) or not isinstance(body.get("tokens"), list):
            raise TokenizerError(f"/tokenize answered HTTP {status}: {json.dumps(body)[:200]}")
        if isinstance(body.get("max_model_len"), int) and body["max_model_len"] > 0:
            self.max_model_len = int(body["max_model_len"])
        return [int(t) for t in body["tokens"]]

    async def probe_overhead(self) -> int:
        """The most tokens the server adds around a prompt: a chat request's template (``messages``, with the
        generation prompt, as a chat completion renders it) or a completion's special tokens. 0 when neither
        form answers a count."""
        plain = len(await self.encode("the"))
        added = [0]
        for payload in ({"model": self.model, "messages": [{"role": "user", "content": "the"}],
                         "add_generation_prompt": True},
                        {"model": self.model, "prompt": "the", "add_special_tokens": True}):
            status, body = await self._post("/tokenize", payload)
            if status == 200 and isinstance(body, dict) and isinstance(body.get("count"), int):
                added.append(int(body["count"]) - plain)
        self.overhead = max(added)
        return self.overhead

    def input_budget(self, output_tokens: int) -> int | None:
        """The most prompt tokens a request asking ``output_tokens`` may send (None: the context is unknown)."""
        if self.max_model_len is None:
            return None
        return self.max_model_len - self.overhead - output_tokens

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
        await tokenizer.probe_overhead()
    except (TokenizerError, OSError, TimeoutError) as exc:
        log.info("the endpoint has no usable /tokenize + /detokenize (%s): prompts stay word-sized", exc)
        return None
    return tokenizer


class ContextTooSmallError(RayliftValueError):
    """A request's output alone does not fit the served context."""


def fitted(tokenizer: EndpointTokenizer, spec: RequestSpec) -> RequestSpec:
    """``spec`` with its input target cut to what the served context leaves beside its output and the template.
    :raises ContextTooSmallError: not even one prompt token fits."""
    budget = tokenizer.input_budget(spec.output_tokens)
    if budget is None or spec.input_tokens <= budget:
        return spec
    if budget < 1:
        raise ContextTooSmallError(
            f"a request asking {spec.output_tokens} output tokens cannot fit the served model's context of "
            f"{tokenizer.max_model_len} tokens (the server adds {tokenizer.overhead} around each prompt): lower the "
            "benchmark profile's mean_output_tokens, or serve a longer context (engine_args max_model_len).")
    return replace(spec, input_tokens=budget)


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
    fit = [fitted(tokenizer, spec) for spec in specs]
    cut = [(spec.input_tokens, f.input_tokens) for spec, f in zip(specs, fit, strict=True) if f is not spec]
    if cut:
        log.warning("%d of %d prompts cut to fit the served context of %s tokens beside their output and %d "
                    "template token(s) (longest asked %d, sent %d): vLLM would answer them 400", len(cut), len(specs),
                    tokenizer.max_model_len, tokenizer.overhead, max(a for a, _ in cut), max(b for _, b in cut))
    specs = fit
    slots = asyncio.Semaphore(concurrency)

    async def sized(spec: RequestSpec) -> RequestSpec:
        async with slots:
            return await size_prompt(tokenizer, spec)

    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(sized(spec)) for spec in specs]
    return [task.result() for task in tasks]
