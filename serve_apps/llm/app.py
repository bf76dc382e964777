"""OpenAI-compatible LLM endpoint: one Ray Serve deployment wrapping vLLM's AsyncLLM.

Why one deployment that is both the HTTP ingress and the engine: every extra Serve hop (ingress
deployment -> model deployment) costs a router round trip and a serialisation per streamed chunk,
which on CPU showed up directly in tokens/s. The engine lives in the replica; the proxy forwards
straight to it. See README "Why a hand-written deployment".

Deploy with ``serve deploy configs/llm-cpu.yaml`` or through raylift; ``build_app(args)`` is the
import path. Nothing is loaded at import time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field, ValidationError
from ray import serve

from llm import openai_protocol as oa

log = logging.getLogger("ray.serve")


class LLMArgs(BaseModel):
    """Application args (the Serve config's ``args``)."""

    model: str = Field(description="Folder (or hub id) vLLM loads, e.g. the staged model's path")
    served_model_name: str = Field(min_length=1)
    engine_args: dict[str, Any] = Field(default_factory=dict, description="Extra vLLM AsyncEngineArgs")
    default_max_tokens: int = Field(default=64, ge=1)
    # Coalesce stream chunks that are already waiting into one SSE message: fewer, larger writes
    # when the client reads slower than the engine produces. 0 = drain only what is ready.
    stream_coalesce_ms: float = Field(default=0.0, ge=0.0)
    fail_on_start: str | None = Field(default=None, description="Testing aid: raise this at start-up")


api = FastAPI(title="raylift LLM", docs_url=None, redoc_url=None)


def _finish_reason(output: Any) -> str | None:
    reason = getattr(output, "finish_reason", None)
    return None if reason is None else str(reason)


@serve.deployment(name="LLMServer", ray_actor_options={"num_cpus": 1})
@serve.ingress(api)
class LLMServer:
    def __init__(self, args: dict[str, Any] | LLMArgs) -> None:
        self.args = args if isinstance(args, LLMArgs) else LLMArgs(**args)
        if self.args.fail_on_start:
            raise RuntimeError(self.args.fail_on_start)
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from llm.model_location import resolve_model

        engine_args = AsyncEngineArgs(
            model=resolve_model(self.args.model),
            served_model_name=[self.args.served_model_name],
            disable_log_stats=True,
            **self.args.engine_args,
        )
        started = time.monotonic()
        self.engine = AsyncLLM.from_engine_args(engine_args)
        self.tokenizer = self.engine.get_tokenizer()
        self.max_model_len = self.engine.model_config.max_model_len
        log.info("vLLM engine for %s ready in %.1fs", self.args.served_model_name, time.monotonic() - started)

    # -- helpers ------------------------------------------------------------------------------
    def _check_model(self, name: str) -> JSONResponse | None:
        if name != self.args.served_model_name:
            return JSONResponse(
                oa.error_body(
                    f"The model {name!r} does not exist; this endpoint serves {self.args.served_model_name!r}.",
                    "not_found_error",
                    "model",
                ),
                status_code=404,
            )
        return None

    def _sampling(self, req: oa.SamplingFields, prompt_len: int) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        room = self.max_model_len - prompt_len
        if room < 1:
            raise ValueError(f"The prompt has {prompt_len} tokens; this model's context is {self.max_model_len}.")
        return SamplingParams(
            max_tokens=min(req.wanted_tokens(self.args.default_max_tokens), room),
            min_tokens=req.min_tokens,
            ignore_eos=req.ignore_eos,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            stop=req.stop,
            # A non-streamed answer needs only the final output: vLLM's frontend then skips building
            # one output object per token, which is CPU the engine gets back (as vLLM's own server does).
            output_kind=RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY,
        )

    async def _deltas(self, prompt_ids: list[int], params: Any) -> AsyncIterator[tuple[str, int, str | None]]:
        """Yield (text, new_tokens, finish_reason) as the engine produces them, coalescing ready chunks."""
        request_id = uuid.uuid4().hex
        stream = self.engine.generate({"prompt_token_ids": prompt_ids}, params, request_id)
        queue: asyncio.Queue[Any] = asyncio.Queue()
        done = object()

        async def pump() -> None:
            try:
                async for out in stream:
                    queue.put_nowait(out)
            except BaseException as exc:  # surfaced to the consumer below
                queue.put_nowait(exc)
            finally:
                queue.put_nowait(done)

        task = asyncio.create_task(pump())
        window = self.args.stream_coalesce_ms / 1000.0
        try:
            finished = False
            while not finished:
                items = [await queue.get()]
                if window:
                    await asyncio.sleep(window)
                while not queue.empty():
                    items.append(queue.get_nowait())
                text, count, finish = [], 0, None
                for item in items:
                    if item is done:
                        finished = True
                        continue
                    if isinstance(item, BaseException):
                        raise item
                    completion = item.outputs[0]
                    text.append(completion.text)
                    count += len(completion.token_ids)
                    finish = _finish_reason(completion) or finish
                if text or count:
                    yield "".join(text), count, finish
        finally:
            if not task.done():
                task.cancel()
                await self.engine.abort(request_id)

    async def _run(self, prompt_ids: list[int], req: oa.SamplingFields, rid: str, chat: bool) -> Any:
        params = self._sampling(req, len(prompt_ids))
        model = self.args.served_model_name
        if not req.stream:
            parts, tokens, finish = [], 0, None
            async for text, count, fin in self._deltas(prompt_ids, params):
                parts.append(text)
                tokens += count
                finish = fin or finish
            u = oa.usage(len(prompt_ids), tokens)
            build = oa.chat_response if chat else oa.completion_response
            return JSONResponse(build(rid, model, "".join(parts), finish, u))

        include_usage = req.stream_options is None or req.stream_options.include_usage
        created = int(time.time())

        async def events() -> AsyncIterator[str]:
            tokens = 0
            if chat:
                yield oa.sse(oa.chat_chunk(rid, model, created, {"role": "assistant", "content": ""}, None))
            async for text, count, finish in self._deltas(prompt_ids, params):
                tokens += count
                if chat:
                    yield oa.sse(oa.chat_chunk(rid, model, created, {"content": text}, finish))
                else:
                    yield oa.sse(oa.completion_chunk(rid, model, created, text, finish))
            if include_usage:
                obj = "chat.completion.chunk" if chat else "text_completion"
                yield oa.sse(oa.usage_chunk(rid, model, created, obj, oa.usage(len(prompt_ids), tokens)))
            yield oa.SSE_DONE

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _parse(self, request: Request, model_cls: type[BaseModel]) -> BaseModel | JSONResponse:
        try:
            return model_cls.model_validate(await request.json())
        except ValidationError as exc:
            first = exc.errors()[0]
            param = ".".join(str(p) for p in first.get("loc", ()))
            return JSONResponse(oa.error_body(f"{param}: {first.get('msg')}", param=param), status_code=400)
        except ValueError:
            return JSONResponse(oa.error_body("The request body is not valid JSON."), status_code=400)

    # -- routes -------------------------------------------------------------------------------
    @api.get("/health")
    async def health(self) -> dict[str, str]:
        await self.engine.check_health()
        return {"status": "ok"}

    @api.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.args.served_model_name,
                    "object": "model",
                    "created": 0,
                    "owned_by": "raylift",
                    "max_model_len": self.max_model_len,
                }
            ],
        }

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Any:
        req = await self._parse(request, oa.ChatRequest)
        if isinstance(req, JSONResponse):
            return req
        if (err := self._check_model(req.model)) is not None:
            return err
        messages = [m.model_dump() for m in req.messages]
        # Render to text, then encode without adding specials: the template already has its own.
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = self.tokenizer.encode(text, add_special_tokens=False)
        try:
            return await self._run(prompt_ids, req, oa.new_id("chatcmpl"), chat=True)
        except ValueError as exc:
            return JSONResponse(oa.error_body(str(exc)), status_code=400)

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> Any:
        req = await self._parse(request, oa.CompletionRequest)
        if isinstance(req, JSONResponse):
            return req
        if (err := self._check_model(req.model)) is not None:
            return err
        prompt_ids = self.tokenizer.encode(req.prompt)
        try:
            return await self._run(prompt_ids, req, oa.new_id("cmpl"), chat=False)
        except ValueError as exc:
            return JSONResponse(oa.error_body(str(exc)), status_code=400)

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()


def build_app(args: dict[str, Any]) -> serve.Application:
    """Serve config entry point: ``import_path: llm.app:build_app``."""
    parsed = LLMArgs(**args)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return LLMServer.bind(parsed)
