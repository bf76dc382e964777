"""OpenAI-compatible endpoint on llama.cpp (llama-cpp-python): the Graviton seed's CPU serving path.

One Ray Serve deployment that is both the FastAPI ingress and the engine, like the vLLM app, and it
speaks the same slice of the OpenAI API (``llm.openai_protocol``): ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions``, streamed (SSE, with a final ``usage`` chunk) or not.

llama.cpp runs one sequence at a time per ``Llama`` instance, so requests to a replica take turns
(an asyncio lock) and concurrency comes from replicas (seed 001: one replica per Graviton node, its
threads = the node's cores). Tokens are generated in a worker thread and handed to the event loop
one by one, so streaming is per token and the replica keeps answering health checks meanwhile.

``args.model`` is the staged model: a folder holding one ``*.gguf`` (or name it with ``gguf_file``),
a ``.gguf`` path, or an ``s3://`` prefix (pulled or read from the mount by ``llm.model_location``).
Deploy with ``serve deploy configs/llamacpp-cpu.yaml`` or through raylift. Nothing is loaded at import.
"""

from __future__ import annotations

import asyncio
import codecs
import inspect
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from ray import serve

from llm import openai_protocol as oa

log = logging.getLogger("ray.serve")


class LlamaCppArgs(BaseModel):
    """Application args (the Serve config's ``args``)."""

    model: str = Field(description="Staged model: folder with a *.gguf, a .gguf file, or s3:// prefix")
    gguf_file: str | None = Field(default=None, description="The GGUF to load when the folder holds several")
    served_model_name: str = Field(min_length=1)
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="llama_cpp.Llama keyword args, e.g. n_ctx, n_threads, n_batch"
    )
    default_max_tokens: int = Field(default=64, ge=1)
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


class Generation:
    """One request's sampling settings in llama.cpp terms, with OpenAI's defaults (no top-k, no min-p)."""

    def __init__(self, req: oa.SamplingFields, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.min_tokens = req.min_tokens
        self.ignore_eos = req.ignore_eos
        self.stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        self.seed = req.seed
        self.sampling = {"temp": req.temperature, "top_p": req.top_p, "top_k": 0, "min_p": 0.0}


class LlamaCppEngine:
    """The model and its generation loop, without Serve (so it can be tested on its own)."""

    def __init__(self, args: LlamaCppArgs) -> None:
        import llama_cpp

        from llm.model_location import resolve_model

        check_engine_args(args.engine_args, llama_cpp.Llama.__init__)
        self.path = find_gguf(resolve_model(args.model), args.gguf_file)
        self.llm = llama_cpp.Llama(model_path=str(self.path), **{"verbose": False, **args.engine_args})
        meta = self.llm.metadata
        self.stop_ids = {self.llm.token_eos()}
        if "tokenizer.ggml.eot_token_id" in meta:  # end-of-turn (chat) ends generation too
            self.stop_ids.add(int(meta["tokenizer.ggml.eot_token_id"]))
        self.max_model_len = self.llm.n_ctx()
        template = meta.get("tokenizer.chat_template")
        self.chat_format = None
        if template:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            self.chat_format = Jinja2ChatFormatter(
                template,
                eos_token=self._token_text(self.llm.token_eos()),
                bos_token=self._token_text(self.llm.token_bos()),
            )
        self.lock = asyncio.Lock()

    def _token_text(self, token: int) -> str:
        return self.llm.detokenize([token], special=True).decode("utf-8", errors="replace")

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """Token ids of the chat, rendered with the GGUF's own chat template (a plain transcript without one)."""
        if self.chat_format is not None:
            text = self.chat_format(messages=messages).prompt
            return self.llm.tokenize(text.encode(), add_bos=False, special=True)
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return self.llm.tokenize(text.encode(), add_bos=True)

    def completion_prompt(self, prompt: str) -> list[int]:
        return self.llm.tokenize(prompt.encode(), add_bos=True)

    def _produce(
        self, prompt: list[int], gen: Generation, emit: Callable[[Any], None], cancel: threading.Event
    ) -> None:
        """Worker thread: generate up to ``max_tokens``, emitting (text, 1, None) per token, then the finish."""
        import numpy as np

        produced = 0
        suppress = sorted(self.stop_ids)

        def no_early_eos(_ids: Any, scores: Any) -> Any:  # ignore_eos / min_tokens, as vLLM honours them
            if gen.ignore_eos or produced < gen.min_tokens:
                scores[suppress] = -np.inf
            return scores

        if gen.seed is not None:
            self.llm.set_seed(gen.seed)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        finish = "length"
        for token in self.llm.generate(
            prompt, repeat_penalty=1.0, logits_processor=[no_early_eos], **gen.sampling
        ):
            if cancel.is_set():
                return
            if token in self.stop_ids:
                finish = "stop"
                break
            produced += 1
            emit((decoder.decode(self.llm.detokenize([token])), 1, None))
            if produced >= gen.max_tokens:
                break
        emit((decoder.decode(b"", final=True), 0, finish))

    async def deltas(self, prompt: list[int], gen: Generation) -> AsyncIterator[tuple[str, int, str | None]]:
        """Yield (text, new_tokens, finish_reason) as llama.cpp produces them; honours stop strings.

        Requests take turns (the lock); the tokens come from a worker thread, so the event loop stays free.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancel = threading.Event()
        done = object()

        def emit(item: Any) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            try:
                self._produce(prompt, gen, emit, cancel)
            except BaseException as exc:  # surfaced to the consumer below
                emit(exc)
            finally:
                emit(done)

        async with self.lock:
            worker = loop.run_in_executor(None, work)
            held = ""  # text that might be the start of a stop string
            hold = max((len(s) for s in gen.stop), default=1) - 1
            try:
                while (item := await queue.get()) is not done:
                    if isinstance(item, BaseException):
                        raise item
                    text, count, finish = item
                    held += text
                    cut = min((held.find(s) for s in gen.stop if s in held), default=-1)
                    if cut >= 0:
                        yield held[:cut], count, "stop"
                        return
                    ready = held if finish or not hold else held[: max(len(held) - hold, 0)]
                    held = held[len(ready) :]
                    if ready or count or finish:
                        yield ready, count, finish
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

    async def _run(self, prompt: list[int], req: oa.SamplingFields, rid: str, chat: bool) -> Any:
        room = self.engine.max_model_len - len(prompt)
        if room < 1:
            raise ValueError(
                f"The prompt has {len(prompt)} tokens; this model's context is {self.engine.max_model_len}."
            )
        gen = Generation(req, min(req.wanted_tokens(self.args.default_max_tokens), room))
        return await oa.respond(
            self.engine.deltas(prompt, gen),
            req,
            rid=rid,
            model=self.args.served_model_name,
            prompt_tokens=len(prompt),
            chat=chat,
        )

    async def _request(self, request: Request, model_cls: type[BaseModel]) -> BaseModel | JSONResponse:
        try:
            req = model_cls.model_validate(await request.json())
        except (ValidationError, ValueError) as exc:
            return JSONResponse(oa.parse_error(exc), status_code=400)
        if req.model != self.args.served_model_name:
            return JSONResponse(oa.model_not_found(req.model, self.args.served_model_name), status_code=404)
        return req

    # -- routes -------------------------------------------------------------------------------------
    @api.get("/health")
    async def health(self) -> dict[str, str]:
        return {"status": "ok"}

    @api.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        return oa.model_card(self.args.served_model_name, self.engine.max_model_len)

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Any:
        req = await self._request(request, oa.ChatRequest)
        if isinstance(req, JSONResponse):
            return req
        prompt = self.engine.chat_prompt([m.model_dump() for m in req.messages])
        try:
            return await self._run(prompt, req, oa.new_id("chatcmpl"), chat=True)
        except ValueError as exc:
            return JSONResponse(oa.error_body(str(exc)), status_code=400)

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> Any:
        req = await self._request(request, oa.CompletionRequest)
        if isinstance(req, JSONResponse):
            return req
        prompt = self.engine.completion_prompt(req.prompt)
        try:
            return await self._run(prompt, req, oa.new_id("cmpl"), chat=False)
        except ValueError as exc:
            return JSONResponse(oa.error_body(str(exc)), status_code=400)


def build_app(args: dict[str, Any]) -> serve.Application:
    """Serve config entry point: ``import_path: llamacpp.app:build_app``."""
    return LlamaCppServer.bind(LlamaCppArgs(**args))
