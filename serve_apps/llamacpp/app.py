"""OpenAI-compatible endpoint on llama.cpp (llama-cpp-python): the Graviton seed's CPU serving path.

One Ray Serve deployment that is both the FastAPI ingress and the engine, like the vLLM app. The
OpenAI surface is llama-cpp-python's own: its request models (``llama_cpp.server.types``), its
``Llama.create_completion`` / ``create_chat_completion`` (GGUF chat template, stop strings, grammar and
JSON mode, logprobs, penalties, logit_bias, seed) and its error route (context overflow -> 400 in
OpenAI's shape). Added on top, because raylift's clients send them: ``stream_options.include_usage``
(a final usage chunk, only when asked) and vLLM's ``ignore_eos``. What llama.cpp cannot do (``n`` > 1,
``best_of`` > 1) is a clear 400, not silently ignored as llama-cpp's own server does.

llama.cpp runs one sequence at a time per ``Llama`` instance, so requests to a replica take turns
(an asyncio lock) and concurrency comes from replicas (seed 001: one replica per Graviton node, its
threads = the node's cores). llama_cpp's generators run in a worker thread and hand each chunk to the
event loop, so streaming is per token and the replica keeps answering health checks meanwhile.

``args.model`` is the staged model: a folder holding one ``*.gguf`` (or name it with ``gguf_file``),
a ``.gguf`` path, or an ``s3://`` prefix (pulled or read from the mount by ``llm.model_location``).
Deploy with ``serve deploy configs/llamacpp-cpu.yaml`` or through raylift. Nothing is loaded at import.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from ray import serve

log = logging.getLogger("ray.serve")


class LlamaCppArgs(BaseModel):
    """Application args (the Serve config's ``args``)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Staged model: folder with a *.gguf, a .gguf file, or s3:// prefix")
    gguf_file: str | None = Field(default=None, description="The GGUF to load when the folder holds several")
    served_model_name: str = Field(min_length=1)
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="llama_cpp.Llama keyword args, e.g. n_ctx, n_threads, n_batch"
    )
    default_max_tokens: int = Field(default=64, ge=1, description="max_tokens when a request names none")
    fail_on_start: str | None = Field(default=None, description="Testing aid: raise this at start-up")


def find_gguf(model: str, gguf_file: str | None) -> Path:
    """The GGUF file to load for a staged model folder (or file); ValueError saying what to set."""
    path = Path(model)
    if path.is_file():
        return path
    if gguf_file:
        chosen = path / gguf_file
        if not chosen.is_file():
            raise ValueError(
                f"{chosen} does not exist: set args.gguf_file to one of the folder's *.gguf files."
            )
        return chosen
    found = sorted(path.glob("*.gguf"))
    if len(found) != 1:
        names = [p.name for p in found]
        raise ValueError(
            f"{model} holds {len(found)} GGUF file(s) {names}: stage a folder with exactly one, or set args.gguf_file."
        )
    return found[0]


def check_engine_args(engine_args: dict[str, Any], accepted: Callable[..., Any]) -> None:
    """Refuse keys ``llama_cpp.Llama`` does not take, naming them (a typo would otherwise be a TypeError)."""
    names = set(inspect.signature(accepted).parameters) - {"self", "model_path", "kwargs"}
    unknown = sorted(set(engine_args) - names)
    if unknown:
        raise ValueError(
            f"llama_cpp.Llama has no argument(s) {unknown}; engine_args takes e.g. n_ctx, n_threads."
        )


def error(message: str, status: int = 400, param: str | None = None) -> JSONResponse:
    """An OpenAI-shaped error, as llama-cpp's own server answers."""
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return JSONResponse(body, status_code=status)


def request_models() -> tuple[type[BaseModel], type[BaseModel]]:
    """llama-cpp's own request models, plus the two fields raylift's clients send (vLLM/OpenAI)."""
    from llama_cpp.server.types import CreateChatCompletionRequest, CreateCompletionRequest

    class Extras(BaseModel):
        stream_options: dict[str, Any] | None = None
        ignore_eos: bool = False

    class Completion(CreateCompletionRequest, Extras):
        pass

    class Chat(CreateChatCompletionRequest, Extras):
        pass

    return Completion, Chat


class Counter:
    """A logits processor that counts what llama.cpp samples (usage for streams, which llama_cpp's
    stream omits) and enforces ``ignore_eos`` / ``min_tokens`` by masking the end tokens."""

    def __init__(self, end_ids: list[int], *, ignore_eos: bool, min_tokens: int) -> None:
        self.end_ids, self.ignore_eos, self.min_tokens = end_ids, ignore_eos, min_tokens
        self.prompt_tokens, self.sampled = 0, 0

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np

        if self.sampled == 0:
            self.prompt_tokens = len(input_ids)
        if self.ignore_eos or self.sampled < self.min_tokens:
            scores[self.end_ids] = -np.inf
        self.sampled += 1
        return scores

    def usage(self, finish_reason: str | None, has_stop_strings: bool) -> dict[str, int]:
        # A "stop" without stop strings ended on an end token, which llama_cpp does not count either.
        completion = self.sampled - (1 if finish_reason == "stop" and not has_stop_strings else 0)
        completion = max(completion, 0)
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
        }


class LlamaCppEngine:
    """The model and its calls, without Serve (so it can be tested on its own)."""

    def __init__(self, args: LlamaCppArgs) -> None:
        import llama_cpp
        from llm.model_location import resolve_model

        check_engine_args(args.engine_args, llama_cpp.Llama.__init__)
        self.path = find_gguf(resolve_model(args.model), args.gguf_file)
        self.llm = llama_cpp.Llama(model_path=str(self.path), **{"verbose": False, **args.engine_args})
        meta = self.llm.metadata
        self.end_ids = {self.llm.token_eos()}
        if "tokenizer.ggml.eot_token_id" in meta:  # end-of-turn (chat) ends generation too
            self.end_ids.add(int(meta["tokenizer.ggml.eot_token_id"]))
        self.max_model_len = self.llm.n_ctx()
        self.lock = asyncio.Lock()

    def call(self, kind: str, kwargs: dict[str, Any], counter: Counter) -> Iterator[dict[str, Any]]:
        """llama_cpp's own ``create_completion``/``create_chat_completion``, always as a chunk iterator."""
        import llama_cpp

        fn = self.llm.create_chat_completion if kind == "chat" else self.llm.create_completion
        processors = llama_cpp.LogitsProcessorList([counter])
        if kwargs.get("logits_processor"):
            processors.extend(kwargs["logits_processor"])
        result = fn(**{**kwargs, "logits_processor": processors})
        return iter([result]) if isinstance(result, dict) else result

    async def run(
        self, kind: str, kwargs: dict[str, Any], counter: Counter
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield llama_cpp's chunks (or its one response) as a worker thread produces them.

        Requests take turns (the lock); the generator runs in a thread, so the event loop stays free.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancel = threading.Event()
        done = object()

        def emit(item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            try:
                for item in self.call(kind, kwargs, counter):
                    if cancel.is_set():
                        return
                    emit(item)
            except BaseException as exc:  # surfaced to the consumer below
                emit(exc)
            finally:
                emit(done)

        async with self.lock:
            worker = loop.run_in_executor(None, work)
            try:
                while (item := await queue.get()) is not done:
                    if isinstance(item, BaseException):
                        raise item
                    yield item
            finally:
                cancel.set()
                await worker


api = FastAPI(title="raylift llama.cpp", docs_url=None, redoc_url=None)


@serve.deployment(name="LlamaCppServer", ray_actor_options={"num_cpus": 1})
@serve.ingress(api)
class LlamaCppServer:
    def __init__(self, args: dict[str, Any] | LlamaCppArgs) -> None:
        self.args = args if isinstance(args, LlamaCppArgs) else LlamaCppArgs(**args)
        if self.args.fail_on_start:
            raise RuntimeError(self.args.fail_on_start)
        started = time.monotonic()
        self.engine = LlamaCppEngine(self.args)
        log.info(
            "llama.cpp model %s (%s) ready in %.1fs",
            self.args.served_model_name,
            self.engine.path.name,
            time.monotonic() - started,
        )

    async def _serve(self, kind: str, request: Request) -> Any:
        completion_cls, chat_cls = request_models()
        try:
            raw = await request.json()
        except ValueError:
            return error("The request body is not valid JSON.")
        try:
            body = (chat_cls if kind == "chat" else completion_cls).model_validate(raw)
        except Exception as exc:  # pydantic.ValidationError
            first = exc.errors()[0] if hasattr(exc, "errors") else {}
            param = ".".join(str(p) for p in first.get("loc", ())) or None
            return error(f"{param}: {first.get('msg')}" if param else str(exc), param=param)
        if body.model and body.model != self.args.served_model_name:
            return error(
                f"The model {body.model!r} does not exist; this endpoint serves {self.args.served_model_name!r}.",
                404,
                "model",
            )
        if (body.n or 1) > 1 or (getattr(body, "best_of", 1) or 1) > 1:
            return error("llama.cpp generates one choice per request: n and best_of must be 1.", param="n")
        if kind == "chat" and not body.messages:
            return error("messages must hold at least one message.", param="messages")
        return await self._respond(kind, body)

    async def _respond(self, kind: str, body: Any) -> Any:
        import llama_cpp

        kwargs = body.model_dump(
            exclude={"n", "best_of", "logit_bias_type", "user", "min_tokens", "stream_options", "ignore_eos", "model"}
        )
        kwargs["model"] = self.args.served_model_name
        if kwargs.get("max_tokens") is None:
            kwargs["max_tokens"] = self.args.default_max_tokens
        if body.logit_bias is not None:
            kwargs["logit_bias"] = {int(k): v for k, v in body.logit_bias.items()}
        if body.grammar is not None:
            kwargs["grammar"] = llama_cpp.LlamaGrammar.from_string(body.grammar)
        stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        counter = Counter(sorted(self.engine.end_ids), ignore_eos=body.ignore_eos, min_tokens=body.min_tokens)
        chunks = self.engine.run(kind, kwargs, counter)
        try:
            # llama_cpp raises ValueError for what the request asks wrong (e.g. "Requested tokens (n)
            # exceed context window of m"): a 400 with its message, as llama-cpp's own server answers.
            first = await anext(chunks)
        except ValueError as exc:
            return error(str(exc))
        if not body.stream:
            await chunks.aclose()
            return JSONResponse(first)
        include_usage = bool((body.stream_options or {}).get("include_usage"))

        async def events() -> AsyncIterator[str]:
            last = first
            yield f"data: {json.dumps(first)}\n\n"
            async for chunk in chunks:
                last = chunk
                yield f"data: {json.dumps(chunk)}\n\n"
            if include_usage:
                finish = (last.get("choices") or [{}])[0].get("finish_reason")
                usage_chunk = {k: last[k] for k in ("id", "object", "created", "model") if k in last}
                yield f"data: {json.dumps(usage_chunk | {'choices': [], 'usage': counter.usage(finish, bool(stops))})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    # -- routes -------------------------------------------------------------------------------------
    @api.get("/health")
    async def health(self) -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": self.args.served_model_name, "object": "model", "owned_by": "me", "permissions": []}
            ],
        }

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Any:
        return await self._serve("chat", request)

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> Any:
        return await self._serve("completion", request)


def build_app(args: dict[str, Any]) -> serve.Application:
    """Serve config entry point: ``import_path: llamacpp.app:build_app``."""
    return LlamaCppServer.bind(LlamaCppArgs(**args))
