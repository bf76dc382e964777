"""serve_apps/llamacpp: the real engine on the tiny GGUF (converted from the tiny Llama), without Ray.

Proves the converter's file loads in llama.cpp with its metadata (context, chat template, stop ids),
and the generation loop's contract the HTTP layer relies on: one delta per token, exact counts,
max_tokens, ignore_eos/min_tokens, stop strings, and that requests take turns on the one model.
"""

from __future__ import annotations

import json

import pytest

from tests.serve_apps.models import run_in_runtime, tiny_gguf_dir

DRIVER = r"""
import asyncio, json, sys
from llm import openai_protocol as oa
from llamacpp.app import Generation, LlamaCppArgs, LlamaCppEngine, check_engine_args, find_gguf

engine = LlamaCppEngine(LlamaCppArgs(model=sys.argv[1], served_model_name="t", engine_args={"n_ctx": 512, "n_threads": 1}))

def gen(**kw):
    req = oa.CompletionRequest(model="t", prompt="x", **kw)
    return Generation(req, req.wanted_tokens(16))

async def collect(prompt, g):
    return [d async for d in engine.deltas(prompt, g)]

async def main():
    chat = engine.chat_prompt([{"role": "user", "content": "Say hello."}])
    out = {"n_ctx": engine.max_model_len, "has_template": engine.chat_format is not None,
           "stop_ids": sorted(engine.stop_ids), "chat_prompt_len": len(chat),
           "chat_prompt_text": engine.llm.detokenize(chat, special=True).decode()}
    out["greedy"] = await collect(chat, gen(max_tokens=8, temperature=0.0, ignore_eos=True))
    out["again"] = await collect(chat, gen(max_tokens=8, temperature=0.0, ignore_eos=True))
    full = "".join(t for t, _, _ in out["greedy"])
    stop = full[3:6] if len(full) > 6 else None
    out["stop"] = stop
    out["stopped"] = await collect(chat, gen(max_tokens=8, temperature=0.0, ignore_eos=True, stop=stop)) if stop else None
    both = await asyncio.gather(collect(chat, gen(max_tokens=4, temperature=0.0, ignore_eos=True)),
                                collect(engine.completion_prompt("Once upon a time"), gen(max_tokens=4, ignore_eos=True)))
    out["concurrent_counts"] = [sum(c for _, c, _ in d) for d in both]
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


def test_the_converted_gguf_carries_context_template_and_stop_tokens(seen: dict) -> None:
    assert seen["n_ctx"] == 512 and seen["has_template"]
    assert seen["stop_ids"] == [1, 3]  # <|eos|> and the chat template's end-of-turn <|end|>
    assert seen["chat_prompt_text"] == "<|bos|><|user|>\nSay hello.<|end|>\n<|assistant|>\n"


def test_one_delta_per_token_up_to_max_tokens(seen: dict) -> None:
    deltas = seen["greedy"]
    assert sum(c for _, c, _ in deltas) == 8
    assert deltas[-1][2] == "length" and all(f is None for _, _, f in deltas[:-1])
    assert "".join(t for t, _, _ in deltas).strip()


def test_greedy_decoding_is_deterministic(seen: dict) -> None:
    assert seen["again"] == seen["greedy"]


def test_a_stop_string_ends_the_text_before_it(seen: dict) -> None:
    if seen["stop"] is None:
        pytest.skip("the tiny model's greedy text is too short to pick a stop string from")
    text = "".join(t for t, _, _ in seen["stopped"])
    full = "".join(t for t, _, _ in seen["greedy"])
    assert seen["stopped"][-1][2] == "stop" and text == full[: full.index(seen["stop"])]


def test_concurrent_requests_take_turns_and_both_complete(seen: dict) -> None:
    assert seen["concurrent_counts"] == [4, 4]


def test_bad_engine_args_and_missing_gguf_are_named(seen: dict) -> None:
    assert "no argument(s) ['n_ctxx']" in seen["errors"]["engine_args"]
    assert "holds 0 GGUF file(s)" in seen["errors"]["no_gguf"]
