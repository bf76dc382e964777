"""Prompt sizing in the served tokenizer's tokens, against a tokenizer whose decode -> encode round trip
changes the count.

The real tokenizer (the tiny model's, through the LLM app's /tokenize) is the judge in
tests/integration/test_local_pipeline.py; here the algorithm meets a byte-level vocabulary (as GPT-2's
and Llama 3's are) with merges: a cut through a two-byte character decodes to U+FFFD, three bytes, so
re-encoding the cut text gives more tokens than the cut kept, and the cut has to move.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from raylift.measure.profiles import RequestSpec, generate_requests, get_profile
from raylift.measure.prompt_sizing import endpoint_tokenizer, size_prompt, size_prompts

MERGES = (b"the ", b"th", b"he")


def _encode(text: str) -> list[bytes]:
    data, out, i = text.encode(), [], 0
    while i < len(data):
        piece = next((m for m in MERGES if data.startswith(m, i)), data[i:i + 1])
        out.append(piece)
        i += len(piece)
    return out


class ByteTokenizerEndpoint:
    """/tokenize and /detokenize of a byte-level merging vocabulary (ids index ``vocab``); decoding a
    partial UTF-8 character gives U+FFFD, as byte-level detokenizers do."""

    def __init__(self) -> None:
        self.vocab: list[bytes] = []

    def _id(self, piece: bytes) -> int:
        if piece not in self.vocab:
            self.vocab.append(piece)
        return self.vocab.index(piece)

    async def post(self, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
        if path == "/tokenize":
            assert payload["add_special_tokens"] is False
            tokens = [self._id(p) for p in _encode(payload["prompt"])]
            return 200, {"count": len(tokens), "tokens": tokens}
        if path == "/detokenize":
            return 200, {"prompt": b"".join(self.vocab[t] for t in payload["tokens"]).decode(errors="replace")}
        return 404, {"detail": "Not Found"}


def count(text: str) -> int:
    return len(_encode(text))


def accented(text: str) -> str:
    """Every 'e' as 'é' (two bytes in UTF-8): cuts land inside characters."""
    return text.replace("e", "é")


@pytest.mark.parametrize("target", [1, 7, 64, 333])
def test_prompts_are_cut_to_the_target_within_one_token(target: int) -> None:
    endpoint = ByteTokenizerEndpoint()
    specs = [RequestSpec(accented(s.prompt), target, s.output_tokens)
             for s in generate_requests(get_profile("smoke"), 20, seed_offset=target)]

    async def run() -> list[RequestSpec]:
        tokenizer = await endpoint_tokenizer(endpoint.post, "m")
        assert tokenizer is not None
        return await size_prompts(tokenizer, specs)

    sized = asyncio.run(run())
    for spec in sized:
        assert spec.prompt_tokens == count(spec.prompt), spec  # the count kept is the text's
        assert abs(spec.prompt_tokens - target) <= 1, (target, spec)
    # most land exactly; the rest end where only half a character would make the count (one token off)
    assert sum(s.prompt_tokens == target for s in sized) >= len(sized) * 0.75
    assert all(s.input_tokens == target for s in sized)  # the request keeps its target too


def test_a_vocabulary_coarser_than_words_repeats_them() -> None:
    endpoint = ByteTokenizerEndpoint()
    spec = RequestSpec("the the", 40, 4)  # 2 tokens of text, 40 wanted

    async def run() -> RequestSpec:
        tokenizer = await endpoint_tokenizer(endpoint.post, "m")
        assert tokenizer is not None
        return await size_prompt(tokenizer, spec)

    sized = asyncio.run(run())
    assert abs(sized.prompt_tokens - 40) <= 1 and sized.prompt.startswith("the ")


def test_an_endpoint_without_tokenize_keeps_word_prompts() -> None:
    async def no_routes(path: str, payload: dict[str, Any]) -> tuple[int, Any]:
        return 404, {"detail": "Not Found"}

    specs = generate_requests(get_profile("smoke"), 3)

    async def run() -> list[RequestSpec]:
        return await size_prompts(await endpoint_tokenizer(no_routes, "m"), specs)

    assert asyncio.run(run()) == specs
    assert all(s.prompt_tokens is None for s in specs)


def test_prompts_are_sized_several_at_a_time_in_order() -> None:
    """Each prompt is three or more round trips; they overlap, at most ``SIZING_CONCURRENCY`` at once, and the result
    is what sizing one at a time gives, in the same order."""
    from raylift.measure.prompt_sizing import SIZING_CONCURRENCY

    specs = [RequestSpec(accented(s.prompt), 64, s.output_tokens)
             for s in generate_requests(get_profile("smoke"), 3 * SIZING_CONCURRENCY, seed_offset=5)]
    in_flight, most = 0, 0

    async def slow(endpoint: ByteTokenizerEndpoint, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await asyncio.sleep(0.002)  # a round trip: the next call waits for the answer
            return await endpoint.post(path, payload)
        finally:
            in_flight -= 1

    async def run(**concurrency: int) -> list[RequestSpec]:
        endpoint = ByteTokenizerEndpoint()
        tokenizer = await endpoint_tokenizer(lambda path, payload: slow(endpoint, path, payload), "m")
        assert tokenizer is not None
        return await size_prompts(tokenizer, specs, **concurrency)

    one_at_a_time = asyncio.run(run(concurrency=1))
    assert most == 1
    most = 0
    together = asyncio.run(run())  # as the benchmark runner calls it
    assert most == SIZING_CONCURRENCY
    assert [s.prompt for s in together] == [s.prompt for s in one_at_a_time]
    assert [s.prompt_tokens for s in together] == [s.prompt_tokens for s in one_at_a_time]
