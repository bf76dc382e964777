"""One list of OpenAI-API requests, and what each one's answer *did*, to compare two servers by.

The same list goes to plain vLLM's OpenAI server and to raylift's endpoint on the same tiny model
(tests/integration/test_serve_apps.py); a request conforms when both give the same ``effect``: the
status and, for errors, vLLM's error type and code; for answers, what a client acts on (texts at
temperature 0 or a fixed seed, number of choices, finish reasons, tool calls, logprob tokens, usage
counts, which stream chunks came). Ids, timestamps and fingerprints are left out: they differ by design.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

MODEL = "tiny-conf"  # the served name both servers use
DEFAULT_MAX_TOKENS = 64  # llm-cpu.yaml's default_max_tokens = vLLM's override_generation_config.max_new_tokens
CONTEXT = 1024  # llm-cpu.yaml's max_model_len

CHAT = [{"role": "user", "content": "Say hello."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 8}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
]
SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"],
    "additionalProperties": False,
}
# Options both servers run with besides llm-cpu.yaml's: a tool parser (named/"required" tool_choice
# needs one; passing it also proves frontend_args reach vLLM) and no free whitespace in structured
# output (the tiny random model would otherwise fill a JSON answer with blanks up to max_tokens).
ENGINE_ARGS = {"structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True}}
FRONTEND_ARGS = {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}
LOGIT_BIAS_TOKEN = 42  # any id of the tiny vocab: +100 makes it the only choice at temperature 0


@dataclass(frozen=True)
class Req:
    """One request; ``check`` names what must hold on both servers beyond being equal."""

    name: str
    method: str
    path: str
    body: Any = None
    raw: str | None = None  # sent as-is (malformed JSON)
    stream: bool = False
    check: tuple[str, ...] = field(default_factory=tuple)


def _chat(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": CHAT, "max_tokens": 8, "temperature": 0.0} | kw


def _cmpl(**kw: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0.0} | kw


REQUESTS: list[Req] = [
    Req("models", "GET", "/v1/models"),
    Req("version", "GET", "/version"),
    Req("health", "GET", "/health"),
    Req("tokenize", "POST", "/tokenize", {"model": MODEL, "prompt": "Hello world"}),
    Req("tokenize_chat", "POST", "/tokenize", {"model": MODEL, "messages": CHAT, "add_generation_prompt": True}),
    Req("detokenize", "POST", "/detokenize", {"model": MODEL, "tokens": [276, 366, 460]}),
    Req("chat_greedy", "POST", "/v1/chat/completions", _chat(), check=("text",)),
    Req("chat_default_max_tokens", "POST", "/v1/chat/completions", _chat(max_tokens=None, ignore_eos=True),
        check=("default_max_tokens",)),
    Req("chat_developer_role", "POST", "/v1/chat/completions",
        _chat(messages=[{"role": "developer", "content": "Be brief."}, *CHAT]), check=("text",)),
    Req("chat_content_parts", "POST", "/v1/chat/completions",
        _chat(messages=[{"role": "user", "content": [{"type": "text", "text": "Say hello."}]}]), check=("text",)),
    Req("chat_n2", "POST", "/v1/chat/completions", _chat(n=2, temperature=1.0, seed=7), check=("n2",)),
    Req("chat_seed", "POST", "/v1/chat/completions", _chat(temperature=1.0, seed=1234), check=("text",)),
    Req("chat_logprobs", "POST", "/v1/chat/completions", _chat(logprobs=True, top_logprobs=3),
        check=("logprobs3",)),
    Req("chat_logit_bias", "POST", "/v1/chat/completions",
        _chat(logit_bias={str(LOGIT_BIAS_TOKEN): 100}, ignore_eos=True), check=("text",)),
    Req("chat_penalties", "POST", "/v1/chat/completions",
        _chat(max_tokens=16, frequency_penalty=1.5, presence_penalty=1.0, repetition_penalty=1.3), check=("text",)),
    Req("chat_min_tokens_ignore_eos", "POST", "/v1/chat/completions",
        _chat(max_tokens=12, min_tokens=12, ignore_eos=True), check=("tokens12",)),
    Req("chat_json_object", "POST", "/v1/chat/completions",
        _chat(max_tokens=48, response_format={"type": "json_object"}), check=("text",)),
    Req("chat_json_schema", "POST", "/v1/chat/completions",
        _chat(max_tokens=32, response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}),
        check=("json_schema",)),
    Req("chat_tool_named", "POST", "/v1/chat/completions",
        _chat(max_tokens=48, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}}),
        check=("tool_call",)),
    Req("chat_tool_auto", "POST", "/v1/chat/completions", _chat(tools=TOOLS, tool_choice="auto"), check=("text",)),
    Req("chat_bad_tool_choice", "POST", "/v1/chat/completions",
        _chat(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "no_such_tool"}}), check=("4xx",)),
    Req("chat_stream_plain", "POST", "/v1/chat/completions", _chat(stream=True), stream=True,
        check=("no_usage_chunk", "choices_every_chunk")),
    Req("chat_stream_usage", "POST", "/v1/chat/completions",
        _chat(stream=True, stream_options={"include_usage": True}), stream=True, check=("usage_chunk_last",)),
    Req("cmpl_greedy", "POST", "/v1/completions", _cmpl(), check=("text",)),
    Req("cmpl_echo", "POST", "/v1/completions", _cmpl(echo=True), check=("echo",)),
    Req("cmpl_list_prompts", "POST", "/v1/completions", _cmpl(prompt=["Once upon a time", "The sky"]),
        check=("n2",)),
    Req("cmpl_token_ids", "POST", "/v1/completions", _cmpl(prompt=[276, 366, 460]), check=("text",)),
    Req("cmpl_logprobs", "POST", "/v1/completions", _cmpl(logprobs=2), check=("text",)),
    Req("cmpl_stream_plain", "POST", "/v1/completions", _cmpl(stream=True), stream=True,
        check=("no_usage_chunk", "choices_every_chunk")),
    Req("cmpl_stream_usage", "POST", "/v1/completions",
        _cmpl(stream=True, stream_options={"include_usage": True}), stream=True, check=("usage_chunk_last",)),
    Req("max_tokens_beyond_context", "POST", "/v1/completions", _cmpl(max_tokens=CONTEXT + 1), check=("400",)),
    Req("context_overflow", "POST", "/v1/completions", _cmpl(prompt="hello " * (CONTEXT + 100)), check=("400",)),
    Req("unknown_model", "POST", "/v1/chat/completions", _chat(model="no-such-model"), check=("404",)),
    Req("empty_messages", "POST", "/v1/chat/completions", _chat(messages=[]), check=("4xx",)),
    Req("malformed_json", "POST", "/v1/chat/completions", raw='{"model": "tiny-conf", "messages": [', check=("4xx",)),
    Req("metrics", "GET", "/metrics", check=("metrics",)),
]

ENGINE_METRICS = (  # what vllm serve's /metrics shows and a Prometheus scrape of raylift must see too
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
)


def _choice_effect(c: dict[str, Any]) -> dict[str, Any]:
    msg = c.get("message") or {}
    lp = c.get("logprobs") or {}
    if "content" in lp:  # chat logprobs
        lp_tokens = [t["token"] for t in lp["content"] or []]
        top_n = sorted({len(t.get("top_logprobs") or []) for t in lp["content"] or []})
    else:
        lp_tokens, top_n = list(lp.get("tokens") or []), sorted({len(t) for t in lp.get("top_logprobs") or []})
    return {
        "text": msg.get("content") if "message" in c else c.get("text"),
        "finish": c.get("finish_reason"),
        "tool_calls": [
            (t["function"]["name"], t["function"]["arguments"]) for t in msg.get("tool_calls") or []
        ],
        "logprob_tokens": lp_tokens,
        "top_logprobs_n": top_n,
    }


def effect(req: Req, resp: httpx.Response, body_text: str) -> dict[str, Any]:
    """What the answer did, without what differs by design (ids, times, paths, fingerprints)."""
    out: dict[str, Any] = {"status": resp.status_code}
    if req.path == "/metrics":
        out["engine_metrics"] = sorted(m for m in ENGINE_METRICS if f"\n{m}" in "\n" + body_text)
        return out
    if req.stream and resp.status_code == 200:
        chunks = [json.loads(ln[6:]) for ln in body_text.splitlines() if ln.startswith("data: {")]
        texts: dict[int, str] = {}
        for ch in chunks:
            for c in ch.get("choices") or []:
                piece = (c.get("delta") or {}).get("content") if "delta" in c else c.get("text")
                texts[c["index"]] = texts.get(c["index"], "") + (piece or "")
        out |= {
            "texts": texts,
            "done": body_text.rstrip().endswith("data: [DONE]"),
            "chunks_without_choices": sum(1 for ch in chunks if not ch.get("choices")),
            "usage_last": bool(chunks and chunks[-1].get("usage") and not chunks[-1].get("choices")),
            "usage_tokens": (chunks[-1].get("usage") or {}).get("completion_tokens") if chunks else None,
        }
        return out
    try:
        data = json.loads(body_text)
    except ValueError:
        out["body"] = body_text[:200]
        return out
    if resp.status_code >= 400 or "error" in data:
        err = data.get("error", data) if isinstance(data, dict) else {}
        out["error"] = {k: err.get(k) for k in ("message", "type", "code", "param")}
        return out
    if req.path == "/v1/models":
        out["ids"] = [m["id"] for m in data["data"]]
        out["max_model_len"] = [m.get("max_model_len") for m in data["data"]]
    elif req.path == "/version":
        out["version"] = data.get("version")
    elif req.path == "/tokenize":
        out |= {"tokens": data.get("tokens"), "count": data.get("count")}
    elif req.path == "/detokenize":
        out["prompt"] = data.get("prompt")
    elif "choices" in data:
        out["choices"] = [_choice_effect(c) for c in data["choices"]]
        usage = data.get("usage") or {}
        out["usage"] = (usage.get("prompt_tokens"), usage.get("completion_tokens"))
    return out


def send(client: httpx.Client, base: str, req: Req) -> dict[str, Any]:
    url = f"{base}{req.path}"
    if req.method == "GET":
        resp = client.get(url)
        return effect(req, resp, resp.text)
    if req.raw is not None:
        resp = client.post(url, content=req.raw, headers={"content-type": "application/json"})
        return effect(req, resp, resp.text)
    body = {k: v for k, v in req.body.items() if v is not None}
    if req.stream:
        with client.stream("POST", url, json=body) as resp:
            text = "".join(resp.iter_text())
        return effect(req, resp, text)
    resp = client.post(url, json=body)
    return effect(req, resp, resp.text)


def record(base: str) -> dict[str, dict[str, Any]]:
    """Every request's effect at ``base``, in list order (one at a time: same batch, same numerics)."""
    with httpx.Client(timeout=120) as client:
        return {req.name: send(client, base, req) for req in REQUESTS}


def check_effect(name: str, seen: dict[str, Any]) -> list[str]:
    """What ``seen`` (one server's effect) breaks of the request's own ``check``s."""
    req = next(r for r in REQUESTS if r.name == name)
    problems: list[str] = []
    choices = seen.get("choices") or []
    for check in req.check:
        ok = True
        if check in ("text", "n2", "logprobs3", "tokens12", "json_schema", "tool_call", "echo",
                     "default_max_tokens"):
            ok = seen["status"] == 200 and bool(choices)
        if ok and check == "text":
            ok = all(c["text"] is not None for c in choices)
        elif ok and check == "default_max_tokens":
            ok = seen["usage"][1] == DEFAULT_MAX_TOKENS
        elif ok and check == "n2":
            ok = len(choices) == 2
        elif ok and check == "logprobs3":
            ok = bool(choices[0]["logprob_tokens"]) and choices[0]["top_logprobs_n"] == [3]
        elif ok and check == "tokens12":
            ok = seen["usage"][1] == 12
        elif ok and check == "json_schema":
            try:
                value = json.loads(choices[0]["text"])
                ok = isinstance(value, dict) and set(value) == {"n"} and isinstance(value["n"], int)
            except (TypeError, ValueError):
                ok = False
        elif ok and check == "tool_call":
            # the named function is called; its arguments are JSON only if the tiny model finished them
            calls = choices[0]["tool_calls"]
            ok = bool(calls) and calls[0][0] == "get_weather"
            if ok and choices[0]["finish"] in ("stop", "tool_calls"):
                ok = isinstance(json.loads(calls[0][1]), dict)
        elif ok and check == "echo":
            ok = choices[0]["text"].startswith("Once upon a time")
        elif check == "no_usage_chunk":
            ok = seen["status"] == 200 and seen["chunks_without_choices"] == 0 and seen["done"]
        elif check == "choices_every_chunk":
            ok = seen["status"] == 200 and seen["chunks_without_choices"] == 0
        elif check == "usage_chunk_last":
            ok = seen["status"] == 200 and seen["usage_last"] and seen["chunks_without_choices"] == 1
        elif check == "400":
            ok = seen["status"] == 400 and bool(seen.get("error"))
        elif check == "404":
            ok = seen["status"] == 404 and bool(seen.get("error"))
        elif check == "4xx":
            ok = 400 <= seen["status"] < 500
        elif check == "metrics":
            ok = seen["status"] == 200 and seen["engine_metrics"] == sorted(ENGINE_METRICS)
        if not ok:
            problems.append(f"{name}: {check} does not hold: {json.dumps(seen)[:400]}")
    return problems


def plain_vllm_command(model: Path, port: int, app: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    """``vllm serve``'s own server with the Serve config's options and env vars plus this module's."""
    from tests.serve_apps.models import RUNTIME_PYTHON

    args = app["args"]
    cmd = [
        str(RUNTIME_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model), "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port),
        "--override-generation-config", json.dumps({"max_new_tokens": args["default_max_tokens"]}),
    ]
    options = {**args.get("frontend_args", {}), **FRONTEND_ARGS, **args["engine_args"], **ENGINE_ARGS}
    # plain vLLM loads the files its default way; the app streams them (load_format runai_streamer): the same
    # answers then also say the streamer loaded the same weights
    options.pop("load_format", None)
    for key, value in options.items():
        flag = f"--{key.replace('_', '-')}"
        if value is True:
            cmd.append(flag)
        elif value is not False:
            cmd += [flag, json.dumps(value) if isinstance(value, dict) else str(value)]
    env = {**os.environ, **app.get("runtime_env", {}).get("env_vars", {})}
    return cmd, env


GREEDY_PROMPTS = ["Hello, my name is", "The capital of France is", "1 2 3 4", "Once upon a time"]


def greedy_texts(url: str, model: str) -> list[str]:
    """Temperature-0 completions of GREEDY_PROMPTS, 16 tokens each."""
    texts = []
    for prompt in GREEDY_PROMPTS:
        resp = httpx.post(f"{url}/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 16,
                                                        "temperature": 0}, timeout=60)  # fmt: skip
        assert resp.status_code == 200, resp.text
        texts.append(resp.json()["choices"][0]["text"])
    return texts


@contextmanager
def running_plain_vllm(cmd: list[str], env: dict[str, str], port: int, log: Path) -> Iterator[str]:
    """Plain vLLM's API server from ``cmd`` until it answers ``/health``; its URL; stopped (its session) after."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"plain vLLM exited {proc.returncode}: {log.read_text()[-3000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(2)
        else:
            raise TimeoutError(f"plain vLLM not up in 300 s: {log.read_text()[-3000:]}")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(10)
