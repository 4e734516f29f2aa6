"""The endpoint's routes (see ``app.py`` for what each answers): health, the model list, chat and
text completions (streamed or whole), and SGLang's and vLLM's ``/generate`` (``native.py``).
Prompts and responses are built on worker threads (``Endpoint.off_loop``); sampling itself is
``completions.generate``; every request's result lands in the endpoint's recorder."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Body

from gemlab.openai_endpoint import bodies, native
from gemlab.openai_endpoint.completions import (
    Generation,
    chat_prompt,
    completion_prompt,
    context_length,
    generate,
    new_id,
)
from gemlab.openai_endpoint.schemas import ChatCompletionRequest, CompletionRequest
from gemlab.openai_endpoint.state import EndpointDep

router = APIRouter()


@router.get("/health")
async def health(endpoint: EndpointDep) -> dict[str, Any]:
    return {"status": "ok", "model": endpoint.model_name, "sampler_version": endpoint.slot.get()[1]}


@router.get("/v1/models")
async def models(endpoint: EndpointDep) -> dict[str, Any]:
    return {"object": "list", "data": [bodies.model_card(endpoint.model_name, endpoint.created)]}


@router.get("/v1/models/{name:path}")
async def model(name: str, endpoint: EndpointDep) -> dict[str, Any]:
    endpoint.check_model(name)
    return bodies.model_card(endpoint.model_name, endpoint.created)


@router.post("/v1/chat/completions", response_model=None)
async def chat_completions(body: ChatCompletionRequest, endpoint: EndpointDep) -> Any:
    endpoint.check_model(body.model)
    body.refuse_unsupported()
    client = endpoint.slot.get()[0]
    tok = client.get_tokenizer()
    prompt, text, messages = await endpoint.off_loop(chat_prompt, body, tok, context_length(client, tok))
    parse_tools = bool(body.tools) and body.tool_choice != "none"
    choices, version = await generate(endpoint.slot, body, prompt, tokenizer=tok, chat=True, parse_tools=parse_tools)
    generation = Generation(
        id=new_id("chatcmpl"), kind="chat", created=int(time.time()), model=endpoint.model_name,
        prompt_token_ids=prompt, choices=choices, sampler_version=version, messages=messages, prompt_text=text,
    )  # fmt: skip
    endpoint.record(generation)
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return bodies.sse(
            await endpoint.off_loop(list, bodies.chat_chunks(generation, tok, body.logprobs, include_usage))
        )
    return await endpoint.off_loop(bodies.chat_response, generation, tok, body.logprobs)


@router.post("/v1/completions", response_model=None)
async def completions(body: CompletionRequest, endpoint: EndpointDep) -> Any:
    endpoint.check_model(body.model)
    body.refuse_unsupported()
    client = endpoint.slot.get()[0]
    tok = client.get_tokenizer()
    prompt, text = await endpoint.off_loop(completion_prompt, body, tok, context_length(client, tok))
    choices, version = await generate(endpoint.slot, body, prompt, tokenizer=tok, chat=False)
    generation = Generation(
        id=new_id("cmpl"), kind="completion", created=int(time.time()), model=endpoint.model_name,
        prompt_token_ids=prompt, choices=choices, sampler_version=version, prompt_text=text,
    )  # fmt: skip
    endpoint.record(generation)
    logprobs = body.logprobs is not None
    if body.stream:
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        return bodies.sse(
            await endpoint.off_loop(list, bodies.completion_chunks(generation, tok, logprobs, include_usage))
        )
    return await endpoint.off_loop(bodies.completion_response, generation, tok, logprobs)


@router.post("/generate", response_model=None)
async def native_generate(endpoint: EndpointDep, body: Any = Body(...)) -> Any:
    style, request = native.parse(body, endpoint.model_name)
    client = endpoint.slot.get()[0]
    tok = client.get_tokenizer()
    prompt, text = await endpoint.off_loop(completion_prompt, request, tok, context_length(client, tok))
    choices, version = await generate(
        endpoint.slot, request, prompt, tokenizer=tok, chat=False, stop_at_end_of_turn=True
    )
    generation = Generation(
        id=new_id("gen"), kind="completion", created=int(time.time()), model=endpoint.model_name,
        prompt_token_ids=prompt, choices=choices, sampler_version=version, prompt_text=text,
    )  # fmt: skip
    endpoint.record(generation)
    return await endpoint.off_loop(native.RESPONSES[style], generation, tok)
