"""The endpoint's routes (gemlab/openai_endpoint/routes.py) on an app of their own, without ``create_app`` or
the front door: what a handler needs is the ``Endpoint`` on ``app.state``, and the error handlers
(gemlab/openai_endpoint/errors.py) answer in OpenAI's shape with one log line."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gemlab.openai_endpoint import Recorder, SamplerSlot
from gemlab.openai_endpoint.errors import EXCEPTION_HANDLERS
from gemlab.openai_endpoint.routes import router
from gemlab.openai_endpoint.state import Endpoint
from tests.serve.conftest import MODEL, ScriptedSampler

HI = [{"role": "user", "content": "hi"}]


def app_of(client: Any, version: int = 0, recorder: Recorder | None = None) -> FastAPI:
    app = FastAPI(exception_handlers=EXCEPTION_HANDLERS)
    app.include_router(router)
    app.state.endpoint = Endpoint(SamplerSlot(client, version=version), MODEL, recorder, asyncio.Semaphore(1))
    return app


def test_the_router_serves_alone_given_an_endpoint(sampler) -> None:
    scripted, recorder = ScriptedSampler(sampler, "hello there"), Recorder()
    with TestClient(app_of(scripted, version=7, recorder=recorder)) as client:
        assert client.get("/health").json() == {"status": "ok", "model": MODEL, "sampler_version": 7}
        assert [card["id"] for card in client.get("/v1/models").json()["data"]] == [MODEL]
        reply = client.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_tokens": 8})
        assert reply.status_code == 200, reply.text
        body = reply.json()
        expected = sampler.get_tokenizer().encode("hello there", add_special_tokens=False)
        assert body["choices"][0]["token_ids"] == expected and body["choices"][0]["message"]["content"] == "hello there"
        assert body["sampler_version"] == 7 and scripted.calls[0]["prompt"] == body["prompt_token_ids"]
        assert recorder.get(body["id"]).choices[0].token_ids == expected
        generated = client.post(
            "/generate", json={"input_ids": body["prompt_token_ids"], "sampling_params": {"max_new_tokens": 8}}
        )
        assert generated.status_code == 200 and generated.json()["output_ids"] == expected


def test_route_errors_are_openai_json_and_one_log_line(sampler, caplog: pytest.LogCaptureFixture) -> None:
    class NoTokenizer:
        def get_tokenizer(self) -> Any:
            raise RuntimeError("no tokenizer")

    caplog.set_level(logging.WARNING, logger="gemlab.openai_endpoint")
    with TestClient(app_of(ScriptedSampler(sampler, "x"))) as client:
        unknown = client.post("/v1/chat/completions", json={"model": "someone/else", "messages": HI})
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
        malformed = client.post("/v1/chat/completions", json={"model": MODEL, "messages": "hi"})
        assert malformed.status_code == 400 and malformed.json()["error"]["param"] == "messages"
    with TestClient(app_of(NoTokenizer()), raise_server_exceptions=False) as client:
        failed = client.post("/v1/chat/completions", json={"model": MODEL, "messages": HI})
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "server_error"
    assert "RuntimeError('no tokenizer')" in failed.json()["error"]["message"]
    records = [r for r in caplog.records if r.name == "gemlab.openai_endpoint"]
    assert [r.getMessage().split(" ", 1)[0] for r in records] == ["404", "400", "500"]
    assert all("\n" not in r.getMessage() and not r.exc_info for r in records)
