"""serve_apps/llamacpp: the real engine on the tiny GGUF (converted from the tiny Llama), without Ray.

Proves the converter's file loads in llama.cpp with its metadata (context, chat template, stop ids),
and llama_cpp's own create_(chat_)completion through the app's thread bridge: exact counts,
max_tokens, usage for streams, stop strings, and that requests take turns on the one model.
"""

from __future__ import annotations

import json

import pytest

from tests.serve_apps.models import run_in_runtime, tiny_gguf_dir

DRIVER = r"""
import asyncio, json, sys
from llamacpp.app import Counter, LlamaCppArgs, LlamaCppEngine, check_engine_args, find_gguf

engine = LlamaCppEngine(LlamaCppArgs(model=sys.argv[1], served_model_name="t", engine_args={"n_ctx": 512, "n_threads": 1}))
CHAT = [{"role": "user", "content": "Say hello."}]

async def collect(kind, ignore_eos=True, min_tokens=0, **kw):
    counter = Counter(sorted(engine.end_ids), ignore_eos=ignore_eos, min_tokens=min_tokens)
    chunks = [c async for c in engine.run(kind, kw, counter)]
    return chunks, counter

def text(chunks, chat=True):
    key = (lambda c: (c["choices"][0].get("delta") or {}).get("content") or "") if chat else (lambda c: c["choices"][0]["text"])
    return "".join(key(c) for c in chunks if c["choices"])

async def main():
    out = {"n_ctx": engine.max_model_len, "end_ids": sorted(engine.end_ids)}
    one, c1 = await collect("chat", messages=CHAT, max_tokens=8, temperature=0.0)
    out["nonstream_usage"] = one[0]["usage"]
    out["nonstream_counter"] = c1.usage(one[0]["choices"][0]["finish_reason"], False)
    out["nonstream_text"] = one[0]["choices"][0]["message"]["content"]
    st, c2 = await collect("chat", messages=CHAT, max_tokens=8, temperature=0.0, stream=True)
    out["stream_text"] = text(st)
    out["stream_finish"] = [c["choices"][0]["finish_reason"] for c in st if c["choices"]][-1]
    out["stream_counter"] = c2.usage(out["stream_finish"], False)
    full = out["stream_text"]
    stop = full[3:6] if len(full) > 6 else None
    out["stop"] = stop
    if stop:
        stopped, _ = await collect("chat", messages=CHAT, max_tokens=8, temperature=0.0, stream=True, stop=[stop])
        out["stopped_text"] = text(stopped)
    both = await asyncio.gather(collect("chat", messages=CHAT, max_tokens=4, temperature=0.0),
                                collect("completion", prompt="Once upon a time", max_tokens=4))
    out["concurrent_counts"] = [r[0][0]["usage"]["completion_tokens"] for r in both]
    try:
        await collect("completion", prompt="x " * 600, max_tokens=4)
    except ValueError as exc:
        out["overflow"] = str(exc)
    errors = {}
    for name, call in {"engine_args": lambda: check_engine_args({"n_ctxx": 1}, __import__("llama_cpp").Llama.__init__),
                       "no_gguf": lambda: find_gguf(sys.argv[2], None)}.items():
        try:
            call()
        except ValueError as exc:
            errors[name] = str(exc)
    out["errors"] = errors
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict:
    empty = tmp_path_factory.mktemp("empty")
    proc = run_in_runtime(DRIVER, str(tiny_gguf_dir()), str(empty))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_converted_gguf_carries_context_and_stop_tokens(seen: dict) -> None:
    assert seen["n_ctx"] == 512
    assert seen["end_ids"] == [1, 3]  # <|eos|> and the chat template's end-of-turn <|end|>


def test_max_tokens_and_usage_from_llama_cpps_own_call(seen: dict) -> None:
    assert seen["nonstream_usage"]["completion_tokens"] == 8 and seen["nonstream_text"].strip()
    # the stream's usage (which llama_cpp's stream lacks) counts what its own response counts
    assert seen["stream_counter"] == seen["nonstream_usage"] == seen["nonstream_counter"]
    assert seen["stream_finish"] == "length"


def test_greedy_decoding_is_deterministic_streamed_or_not(seen: dict) -> None:
    assert seen["stream_text"] == seen["nonstream_text"]


def test_a_stop_string_ends_the_text_before_it(seen: dict) -> None:
    if seen["stop"] is None:
        pytest.skip("the tiny model's greedy text is too short to pick a stop string from")
    full = seen["stream_text"]
    assert seen["stopped_text"] == full[: full.index(seen["stop"])]


def test_concurrent_requests_take_turns_and_both_complete(seen: dict) -> None:
    assert seen["concurrent_counts"] == [4, 4]


def test_context_overflow_is_llama_cpps_value_error(seen: dict) -> None:
    assert "exceed context window of 512" in seen["overflow"]


def test_bad_engine_args_and_missing_gguf_are_named(seen: dict) -> None:
    assert "no argument(s) ['n_ctxx']" in seen["errors"]["engine_args"]
    assert "holds 0 GGUF file(s)" in seen["errors"]["no_gguf"]
