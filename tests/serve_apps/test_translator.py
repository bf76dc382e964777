"""serve_apps/translator: the real Translator class on the tiny T5, driven with HTTP requests (no Ray).

The seed's client contract: POST a JSON string, get the translation as text; a list gives a JSON list;
bad bodies get a 400 that says what to send. ``reconfigure`` (user_config) changes generation in place.
"""

from __future__ import annotations

import json

import pytest

from tests.serve_apps.models import run_in_runtime, tiny_t5_path

DRIVER = r"""
import asyncio, json, sys
from starlette.requests import Request
from translator.app import VERSION_HEADER, Translator, TranslatorArgs

app = Translator.func_or_class(TranslatorArgs(model=sys.argv[1], device="cpu", version="v1",
                                              generation={"max_new_tokens": 6}))

def request(method, body):
    scope = {"type": "http", "method": method, "path": "/", "query_string": b"",
             "headers": [(b"content-type", b"application/json")]}
    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}
    return Request(scope, receive)

async def call(method, body=b""):
    resp = await app(request(method, body))
    return resp.status_code, resp.body.decode(), resp.headers.get(VERSION_HEADER)

async def main():
    out = {"single": await call("POST", json.dumps("Hello ECS!").encode()),
           "batch": await call("POST", json.dumps(["Hello ECS!", "the cat is red"]).encode()),
           "not_json": await call("POST", b"Hello"),
           "wrong_shape": await call("POST", json.dumps({"text": "Hello"}).encode()),
           "too_many": await call("POST", json.dumps(["a"] * 17).encode()),
           "health": await call("GET")}
    app.reconfigure({"max_new_tokens": 2})
    out["short"] = await call("POST", json.dumps("Hello ECS!").encode())
    out["prefix"] = app.prefix
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def seen() -> dict:
    proc = run_in_runtime(DRIVER, str(tiny_t5_path()))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_json_string_gets_its_translation_as_text(seen: dict) -> None:
    status, text, version = seen["single"]
    assert status == 200 and text.strip() and not text.startswith(("{", "["))
    assert version == "v1"


def test_a_list_gets_a_json_list_in_the_same_order(seen: dict) -> None:
    status, body, _ = seen["batch"]
    out = json.loads(body)
    assert status == 200 and len(out) == 2 and all(t.strip() for t in out)
    assert out[0] == seen["single"][1]  # same input, same (greedy) output, batched or not


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("not_json", "The body must be JSON"),
        ("wrong_shape", "Send a non-empty JSON string"),
        ("too_many", "At most 16 texts per request"),
    ],
)
def test_bad_bodies_get_a_400_saying_what_to_send(seen: dict, case: str, message: str) -> None:
    status, text, _ = seen[case]
    assert status == 400 and message in text


def test_get_is_a_health_probe_naming_model_and_version(seen: dict) -> None:
    status, body, _ = seen["health"]
    assert status == 200 and json.loads(body) == {"status": "ok", "model": "translator", "version": "v1"}


def test_the_models_task_prefix_is_used_and_user_config_changes_generation_in_place(seen: dict) -> None:
    assert seen["prefix"] == "translate English to French: "  # from config.task_specific_params, as t5-small
    short, full = seen["short"][1], seen["single"][1]
    assert short and len(short) < len(full) and full.startswith(short)  # 2 of the same greedy tokens, not 6
