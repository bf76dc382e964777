"""OpenAI-compatible LLM endpoint: ONE Ray Serve deployment that is both the HTTP ingress and a vLLM
engine, serving vLLM's own OpenAI server app.

Why one deployment: every extra Serve hop (ingress deployment -> model deployment) costs a router
round trip and a serialisation per streamed chunk, which on CPU showed up directly in tokens/s. The
engine lives in the replica; the proxy forwards straight to it. See README "Why a hand-written Serve
deployment".

Why vLLM's app and not our own routes: whatever ``vllm serve`` accepts, this endpoint must accept with
the same status, body and effect (n, logprobs, logit_bias, response_format, tools, echo, token-id
prompts, errors in vLLM's shape, /tokenize, /version, /metrics, ...). So the replica builds the very
FastAPI app vLLM's API server builds (``build_app`` + ``init_app_state`` with OpenAIServingModels,
OpenAIServingChat, OpenAIServingCompletion, ServingTokenization) from a namespace parsed by vLLM's own
CLI parser, and hands it to Serve late-bound (``__serve_build_asgi_app__``, as ``ray.serve.llm``'s
LLMServer does). Where each supported vLLM keeps these is in ``llm.vllm_options.VLLM_API`` (the images ship
vLLM 0.32 and, on Neuron, 0.9.1); tests check it against the runtime's vLLM and each image's vLLM wheel.

Deploy with ``serve deploy configs/llm-cpu.yaml`` or through raylift; ``build_app(args)`` is the
import path. Nothing heavy is loaded at import time.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import types
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from ray import serve

from llm.vllm_options import CALL_ARGS, SERVING_STATE, VLLM_API, accepted, call_vllm, vllm_api, vllm_namespace
from llm.warmup_cache import prepare as prepare_warmup_cache

__all__ = ["VLLM_API", "LLMArgs", "LLMServer", "build_app", "vllm_api", "vllm_namespace"]

log = logging.getLogger("ray.serve")

class LLMArgs(BaseModel):
    """Application args (the Serve config's ``args``); unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="Folder (or hub id) vLLM loads, e.g. the staged model's path")
    served_model_name: str = Field(min_length=1)
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="vLLM engine args (AsyncEngineArgs), as `vllm serve` takes them"
    )
    frontend_args: dict[str, Any] = Field(
        default_factory=dict,
        description="vLLM OpenAI-server options: chat_template, tool_call_parser, enable_auto_tool_choice, "
        "response_role, max_log_len, enable_log_requests, ... (reasoning_parser is an engine arg in vLLM)",
    )
    default_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="The most output tokens any request gets (vLLM's override_generation_config.max_new_tokens, "
        "a server-wide limit in vLLM): max_tokens of a request that names none, and the cap of one asking for "
        "more (its min_tokens above it is a 400). None = vLLM's default, the rest of the context",
    )
    warmup_cache: bool = Field(
        default=True,
        description="Stage the engine's warm-up: before the engine starts, fetch the compile cache of this vLLM, model, "
        "compile-relevant engine args and hardware from the store beside the staged model (``warmup-cache/<key>/``, "
        "checked by sha256; a bad or stale one is ignored with a log line), and publish it after a cold start. "
        "False = vLLM's own local caches only",
    )
    fail_on_start: str | None = Field(default=None, description="Testing aid: raise this at start-up")

    def vllm_options(self) -> dict[str, Any]:
        """Every option as ``vllm serve --config`` takes it (frontend and engine in one flat mapping)."""
        overlap = sorted(set(self.engine_args) & set(self.frontend_args))
        if overlap:
            raise ValueError(f"{overlap} set in both engine_args and frontend_args: set each once.")
        for reserved in ("model", "served_model_name"):
            if reserved in self.engine_args or reserved in self.frontend_args:
                raise ValueError(f"Set {reserved!r} as an app arg, not inside engine_args/frontend_args.")
        options: dict[str, Any] = {**self.frontend_args, **self.engine_args}
        if self.default_max_tokens is not None:
            override = dict(options.get("override_generation_config") or {})
            override.setdefault("max_new_tokens", self.default_max_tokens)
            options["override_generation_config"] = override
        return options


@serve.deployment(name="LLMServer", ray_actor_options={"num_cpus": 1})
@serve.ingress()
class LLMServer:
    """Starts the engine, then serves vLLM's own OpenAI app (built in ``__serve_build_asgi_app__``)."""

    async def __init__(self, args: dict[str, Any] | LLMArgs) -> None:
        self.args = args if isinstance(args, LLMArgs) else LLMArgs(**args)
        if self.args.fail_on_start:
            raise RuntimeError(self.args.fail_on_start)
        from llm.model_location import resolve_model

        started = time.monotonic()
        # before vLLM is imported: the cache folders are env vars its engine processes inherit
        warmup = prepare_warmup_cache(self.args.model, self.args.engine_args) if self.args.warmup_cache else None
        # load_format runai_streamer: vLLM's Run:ai streamer reads the staged s3:// prefix (or a local folder)
        # straight into memory, so the weights are never copied to this node's disk
        streamed = self.args.engine_args.get("load_format") == "runai_streamer"
        self.vllm_args = vllm_namespace(
            resolve_model(self.args.model, streamed=streamed), self.args.served_model_name,
            self.args.vllm_options(),
        )
        engine_args = vllm_api("AsyncEngineArgs").from_cli_args(self.vllm_args)
        propagate = vllm_api("propagate_flash_late_interaction", optional=True)
        if propagate is not None:  # vLLM 0.9.1 (Neuron) has no late-interaction options to carry over
            propagate(self.vllm_args, engine_args)
        # vLLM's own engine-client builder (config, AsyncLLM, shutdown on exit), held open for the
        # replica's life. The engine's output handler runs on this (the replica's) event loop.
        self._stack = contextlib.AsyncExitStack()
        self.engine = await self._stack.enter_async_context(
            call_vllm("build_engine_client", {"engine_args": engine_args})
        )
        log.info("vLLM engine for %s ready in %.1fs", self.args.served_model_name, time.monotonic() - started)
        if warmup is not None and not warmup.found:  # the first replica of this key: publish while serving
            threading.Thread(target=warmup.publish, name="warmup-cache-publish", daemon=True).start()

    async def __serve_build_asgi_app__(self) -> Any:
        """vLLM's API-server app with its serving state, exactly as its launcher builds it."""
        # By parameter name, as each vLLM's signature asks: 0.32 takes the engine's supported tasks and
        # model config, 0.9.1 (Neuron) the engine's whole config instead.
        wanted = accepted(vllm_api("build_app")) | accepted(vllm_api("init_app_state"))
        supplied: dict[str, Any] = {"args": self.vllm_args, "engine_client": self.engine}
        if "supported_tasks" in wanted:
            supplied["supported_tasks"] = await self.engine.get_supported_tasks()
        if "model_config" in wanted:
            supplied["model_config"] = self.engine.model_config
        if "vllm_config" in wanted:
            supplied["vllm_config"] = await self.engine.get_vllm_config()
        app = call_vllm("build_app", {k: v for k, v in supplied.items() if k in CALL_ARGS["build_app"]})
        supplied["state"] = app.state
        await call_vllm("init_app_state", {k: v for k, v in supplied.items() if k in CALL_ARGS["init_app_state"]})
        for cls_name, attrs in SERVING_STATE.items():
            if not any(isinstance(getattr(app.state, attr, None), vllm_api(cls_name)) for attr in attrs):
                raise TypeError(f"vLLM's app state has no {cls_name} at app.state.{'/'.join(attrs)}: check VLLM_API.")
        # On an engine error vLLM's handler flips should_exit on the uvicorn server its launcher keeps
        # in app.state.server; Serve has no such server (it restarts the replica via check_health),
        # but the attribute must exist or the lookup replaces the engine error (as ray.serve.llm does).
        app.state.server = types.SimpleNamespace()
        return app

    async def check_health(self) -> None:
        """Serve's replica health check: a dead engine fails it, so Serve replaces the replica."""
        await self.engine.check_health()

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        # AsyncLLM (vLLM V1) has shutdown(); vLLM 0.9.1's V0 multiprocess client (Neuron) has close()
        stop = getattr(engine, "shutdown", None) or getattr(engine, "close", None)
        if stop is not None:
            stop()


def build_app(args: dict[str, Any]) -> serve.Application:
    """Serve config entry point: ``import_path: llm.app:build_app``."""
    parsed = LLMArgs(**args)
    parsed.vllm_options()  # overlap/reserved-key errors at deploy time, not in the replica
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return LLMServer.bind(parsed)
