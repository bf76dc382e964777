"""The slice of the OpenAI API the LLM app speaks: request models and response/chunk builders.

Kept free of vLLM and Ray so it can be tested and reused by any engine-backed deployment (the vLLM and
llama.cpp apps both speak it).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import BaseModel, Field


class ChatMessage(BaseModel):
    role: Literal["system", "user", "assistant", "tool"]
    content: str


class StreamOptions(BaseModel):
    include_usage: bool = True


class SamplingFields(BaseModel):
    model: str
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    # vLLM extensions benchmarks rely on to control output length
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False

    def wanted_tokens(self, default: int) -> int:
        return self.max_completion_tokens or self.max_tokens or default


class ChatRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)


class CompletionRequest(SamplingFields):
    prompt: str = Field(min_length=1)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def chat_response(rid: str, model: str, text: str, finish: str | None, u: dict[str, int]) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
        ],
        "usage": u,
    }


def completion_response(rid: str, model: str, text: str, finish: str | None, u: dict[str, int]) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
        "usage": u,
    }


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"


SSE_DONE = "data: [DONE]\n\n"


def chat_chunk(rid: str, model: str, created: int, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def completion_chunk(rid: str, model: str, created: int, text: str, finish: str | None) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
    }


def usage_chunk(rid: str, model: str, created: int, obj: str, u: dict[str, int]) -> dict[str, Any]:
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": u}


def model_not_found(name: str, served: str) -> dict[str, Any]:
    """The 404 body for a request naming a model this endpoint does not serve."""
    return error_body(
        f"The model {name!r} does not exist; this endpoint serves {served!r}.", "not_found_error", "model"
    )


def parse_error(exc: Exception) -> dict[str, Any]:
    """The 400 body for a request that is not valid JSON or does not match the request model."""
    errors = getattr(exc, "errors", None)
    if callable(errors):  # pydantic.ValidationError
        first = errors()[0]
        param = ".".join(str(p) for p in first.get("loc", ()))
        return error_body(f"{param}: {first.get('msg')}", param=param)
    return error_body("The request body is not valid JSON.")


def model_card(served: str, max_model_len: int) -> dict[str, Any]:
    """``GET /v1/models`` listing the one served model."""
    return {
        "object": "list",
        "data": [
            {"id": served, "object": "model", "created": 0, "owned_by": "raylift", "max_model_len": max_model_len}
        ],
    }


async def respond(
    deltas: AsyncIterator[tuple[str, int, str | None]],
    req: SamplingFields,
    *,
    rid: str,
    model: str,
    prompt_tokens: int,
    chat: bool,
) -> Any:
    """The HTTP answer for an engine's ``(text, new_tokens, finish_reason)`` stream: one JSON body, or
    SSE chunks (a role chunk first for chat, a ``usage`` chunk last unless the client opted out)."""
    from fastapi.responses import JSONResponse, StreamingResponse

    if not req.stream:
        parts, tokens, finish = [], 0, None
        async for text, count, fin in deltas:
            parts.append(text)
            tokens += count
            finish = fin or finish
        build = chat_response if chat else completion_response
        return JSONResponse(build(rid, model, "".join(parts), finish, usage(prompt_tokens, tokens)))

    include_usage = req.stream_options is None or req.stream_options.include_usage
    created = int(time.time())

    async def events() -> AsyncIterator[str]:
        tokens = 0
        if chat:
            yield sse(chat_chunk(rid, model, created, {"role": "assistant", "content": ""}, None))
        async for text, count, finish in deltas:
            tokens += count
            if chat:
                yield sse(chat_chunk(rid, model, created, {"content": text}, finish))
            else:
                yield sse(completion_chunk(rid, model, created, text, finish))
        if include_usage:
            obj = "chat.completion.chunk" if chat else "text_completion"
            yield sse(usage_chunk(rid, model, created, obj, usage(prompt_tokens, tokens)))
        yield SSE_DONE

    return StreamingResponse(events(), media_type="text/event-stream")
