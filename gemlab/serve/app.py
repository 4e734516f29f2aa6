"""An OpenAI-compatible HTTP endpoint (FastAPI) over any Tinker ``SamplingClient``.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (both also
with ``"stream": true``, as server-sent events ending in ``data: [DONE]``), ``GET /health``, and
``POST /generate``, SGLang's and vLLM's token-in token-out route that atroposlib's
``ManagedServer`` uses (``native.py``).

Extensions to OpenAI's response format, for training on what was sampled:

- ``choices[i].token_ids``: the sampled token ids, end-of-turn/stop token included (for a
  streamed chunk, the ids of that chunk);
- ``prompt_token_ids``: the prompt exactly as the model saw it (chat template applied);
- ``sampler_version``: the weights version that sampled it (see ``SamplerSlot.set``).

``logprobs`` follow OpenAI's formats (chat: ``logprobs.content[*].{token, logprob, bytes,
top_logprobs}``; completions: ``logprobs.{tokens, token_logprobs, top_logprobs, text_offset}``)
with one entry per sampled token, aligned with ``token_ids``; top alternatives come from the
sampler's ``topk_sample_logprobs`` (Tinker's and the local backend's). ``tools``
and ``tool_choice`` go into the chat template and calls come back as ``message.tool_calls``
(see ``tools.py``). Errors are OpenAI's JSON shape, each one line in the ``gemlab.serve`` log:
400 malformed body, invalid Unicode or unsupported field, 401 wrong key, 400 foreign ``Host``,
413 body too large, 503 busy (see ``guard.py``), 404 unknown model or route, 400 with code
``context_length_exceeded`` when the prompt or ``max_tokens`` does not fit, 500 if the sampler
fails. The local backend returns a sample whole, so a stream's chunks all follow the
end of sampling.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TypeVar

from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gemlab.serve.completions import (
    Choice,
    Generation,
    SamplerSlot,
    chat_prompt,
    completion_prompt,
    context_length,
    generate,
    new_id,
    text_deltas,
    token_pieces,
)
from gemlab.serve import native
from gemlab.serve.guard import Guard, Limits
from gemlab.serve.recorder import Recorder
from gemlab.serve.schemas import ChatCompletionRequest, CompletionRequest, OpenAIError

log = logging.getLogger("gemlab.serve")
T = TypeVar("T")


def create_app(
    sampler: Any,
    *,
    model_name: str,
    recorder: Recorder | None = None,
    limits: Limits | None = None,
    prep_threads: int = 2,
) -> FastAPI:
    """The endpoint serving ``sampler`` (a ``SamplingClient`` or a ``SamplerSlot`` to swap
    weights through) under the model id ``model_name``; every request lands in ``recorder``.

    ``limits`` (key, allowed ``Host`` names, body size, concurrency; see ``guard.Limits``)
    default to loopback names only, no key, 4 MiB bodies, 64 requests at once. Templates,
    tokenizers and response building run on at most ``prep_threads`` worker threads, so the
    event loop (and ``/health``) stays free."""
    slot = sampler if isinstance(sampler, SamplerSlot) else SamplerSlot(sampler)
    limits = limits or Limits()
    app = FastAPI(title="gemlab OpenAI-compatible endpoint")
    app.add_middleware(Guard, limits=limits)
    app.state.slot, app.state.recorder, app.state.model_name, app.state.limits = slot, recorder, model_name, limits
    created = int(time.time())
    workers = asyncio.Semaphore(prep_threads)

    async def off_loop(fn: Callable[..., T], *args: Any) -> T:
        async with workers:
            return await asyncio.to_thread(fn, *args)

    def check_model(name: str) -> None:
        if name != model_name:
            raise OpenAIError(
                404, f"The model {name!r} does not exist; this server serves {model_name!r}", param="model", code="model_not_found"
            )

    def answer(request: Request, error: OpenAIError) -> JSONResponse:
        log.warning("%d %s %s: %s", error.status, request.method, request.url.path, error.message)
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(OpenAIError)
    async def _openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
        return answer(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        message = f"malformed request body: {first.get('msg', 'invalid')}" + (f" at {where!r}" if where else "")
        return answer(request, OpenAIError(400, message, param=where or None))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        return answer(request, OpenAIError(exc.status_code, str(exc.detail), code=code))

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception) -> JSONResponse:
        return answer(request, OpenAIError(500, f"internal error: {exc!r}", type="server_error"))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": model_name, "sampler_version": slot.get()[1]}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(model_name, created)]}

    @app.get("/v1/models/{name:path}")
    async def model(name: str) -> dict[str, Any]:
        check_model(name)
        return _model_card(model_name, created)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest) -> Any:
        check_model(body.model)
        body.refuse_unsupported()
        client = slot.get()[0]
        tok = client.get_tokenizer()
        prompt, text, messages = await off_loop(chat_prompt, body, tok, context_length(client, tok))
        parse_tools = bool(body.tools) and body.tool_choice != "none"
        choices, version = await generate(slot, body, prompt, tokenizer=tok, chat=True, parse_tools=parse_tools)
        generation = Generation(
            id=new_id("chatcmpl"), kind="chat", created=int(time.time()), model=model_name,
            prompt_token_ids=prompt, choices=choices, sampler_version=version, messages=messages, prompt_text=text,
        )  # fmt: skip
        if recorder is not None:
            recorder.add(generation)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return _sse(await off_loop(list, _chat_chunks(generation, tok, body.logprobs, include_usage)))
        return await off_loop(_chat_response, generation, tok, body.logprobs)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> Any:
        check_model(body.model)
        body.refuse_unsupported()
        client = slot.get()[0]
        tok = client.get_tokenizer()
        prompt, text = await off_loop(completion_prompt, body, tok, context_length(client, tok))
        choices, version = await generate(slot, body, prompt, tokenizer=tok, chat=False)
        generation = Generation(
            id=new_id("cmpl"), kind="completion", created=int(time.time()), model=model_name,
            prompt_token_ids=prompt, choices=choices, sampler_version=version, prompt_text=text,
        )  # fmt: skip
        if recorder is not None:
            recorder.add(generation)
        logprobs = body.logprobs is not None
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return _sse(await off_loop(list, _completion_chunks(generation, tok, logprobs, include_usage)))
        return await off_loop(_completion_response, generation, tok, logprobs)

    @app.post("/generate", response_model=None)
    async def native_generate(body: Any = Body(...)) -> Any:
        style, request = native.parse(body, model_name)
        client = slot.get()[0]
        tok = client.get_tokenizer()
        prompt, text = await off_loop(completion_prompt, request, tok, context_length(client, tok))
        choices, version = await generate(slot, request, prompt, tokenizer=tok, chat=False, stop_at_end_of_turn=True)
        generation = Generation(
            id=new_id("gen"), kind="completion", created=int(time.time()), model=model_name,
            prompt_token_ids=prompt, choices=choices, sampler_version=version, prompt_text=text,
        )  # fmt: skip
        if recorder is not None:
            recorder.add(generation)
        return await off_loop(native.RESPONSES[style], generation, tok)

    return app


# ----- response bodies --------------------------------------------------------------------
def _model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "gemlab"}


def _usage(generation: Generation) -> dict[str, int]:
    completion = sum(len(c.token_ids) for c in generation.choices)
    prompt = len(generation.prompt_token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _alternatives(top: list[tuple[int, float]], tokenizer: Any) -> list[dict[str, Any]]:
    pieces = token_pieces([t for t, _ in top], tokenizer)
    return [{"token": p, "logprob": lp, "bytes": list(p.encode("utf-8"))} for p, (_, lp) in zip(pieces, top)]


def _top(choice: Choice, start: int, count: int) -> list[list[tuple[int, float]]]:
    """The top alternatives of tokens ``start..start+count`` (empty lists where none were asked)."""
    rows = choice.top_logprobs or []
    return [rows[i] if i < len(rows) else [] for i in range(start, start + count)]


def _chat_logprobs(choice: Choice, tokenizer: Any, start: int = 0, count: int | None = None) -> dict[str, Any]:
    count = len(choice.token_ids) - start if count is None else count
    token_ids, logprobs = choice.token_ids[start : start + count], choice.logprobs[start : start + count]
    pieces = token_pieces(token_ids, tokenizer)
    return {
        "content": [
            {"token": piece, "logprob": lp, "bytes": list(piece.encode("utf-8")), "top_logprobs": _alternatives(top, tokenizer)}
            for piece, lp, top in zip(pieces, logprobs, _top(choice, start, count))
        ],
        "refusal": None,
    }


def _completion_logprobs(choice: Choice, tokenizer: Any, offset: int, start: int = 0, count: int | None = None) -> dict[str, Any]:
    count = len(choice.token_ids) - start if count is None else count
    pieces = token_pieces(choice.token_ids[start : start + count], tokenizer)
    offsets = []
    for piece in pieces:
        offsets.append(offset)
        offset += len(piece)
    top = None
    if choice.top_logprobs is not None:
        top = [{a["token"]: a["logprob"] for a in _alternatives(row, tokenizer)} for row in _top(choice, start, count)]
    return {"tokens": pieces, "token_logprobs": choice.logprobs[start : start + count], "top_logprobs": top, "text_offset": offsets}


def _extensions(generation: Generation) -> dict[str, Any]:
    return {"prompt_token_ids": generation.prompt_token_ids, "sampler_version": generation.sampler_version}


def _message(choice: Choice) -> dict[str, Any]:
    if choice.tool_calls:
        return {"role": "assistant", "content": choice.content, "tool_calls": choice.tool_calls}
    return {"role": "assistant", "content": choice.text}


def _chat_response(generation: Generation, tokenizer: Any, logprobs: bool) -> dict[str, Any]:
    choices = [
        {
            "index": c.index,
            "message": _message(c),
            "logprobs": _chat_logprobs(c, tokenizer) if logprobs else None,
            "finish_reason": c.finish_reason,
            "token_ids": c.token_ids,
        }
        for c in generation.choices
    ]
    return {
        "id": generation.id, "object": "chat.completion", "created": generation.created, "model": generation.model,
        "choices": choices, "usage": _usage(generation), **_extensions(generation),
    }  # fmt: skip


def _completion_response(generation: Generation, tokenizer: Any, logprobs: bool) -> dict[str, Any]:
    offset = len(generation.prompt_text)
    choices = [
        {
            "index": c.index,
            "text": c.text,
            "logprobs": _completion_logprobs(c, tokenizer, offset) if logprobs else None,
            "finish_reason": c.finish_reason,
            "token_ids": c.token_ids,
        }
        for c in generation.choices
    ]
    return {
        "id": generation.id, "object": "text_completion", "created": generation.created, "model": generation.model,
        "choices": choices, "usage": _usage(generation), **_extensions(generation),
    }  # fmt: skip


# ----- streaming --------------------------------------------------------------------------
def _sse(chunks: list[dict[str, Any]]) -> StreamingResponse:
    async def events() -> AsyncIterator[str]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _chat_chunks(generation: Generation, tokenizer: Any, logprobs: bool, include_usage: bool) -> Iterator[dict[str, Any]]:
    head = {"id": generation.id, "object": "chat.completion.chunk", "created": generation.created, "model": generation.model}
    for choice in generation.choices:
        yield {**head, "choices": [{"index": choice.index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}], **_extensions(generation)}
        if choice.tool_calls:  # the content before the calls, then each call whole
            if choice.content:
                yield {**head, "choices": [{"index": choice.index, "delta": {"content": choice.content}, "logprobs": None, "finish_reason": None}]}
            calls = [{"index": i, **call} for i, call in enumerate(choice.tool_calls)]
            yield {**head, "choices": [{"index": choice.index, "delta": {"tool_calls": calls}, "logprobs": _chat_logprobs(choice, tokenizer) if logprobs else None, "finish_reason": None, "token_ids": choice.token_ids}]}
        else:
            for i, delta in enumerate(text_deltas(choice, tokenizer)):
                yield {**head, "choices": [{
                    "index": choice.index,
                    "delta": {"content": delta},
                    "logprobs": _chat_logprobs(choice, tokenizer, i, 1) if logprobs else None,
                    "finish_reason": None,
                    "token_ids": [choice.token_ids[i]],
                }]}  # fmt: skip
        yield {**head, "choices": [{"index": choice.index, "delta": {}, "logprobs": None, "finish_reason": choice.finish_reason}]}
    if include_usage:
        yield {**head, "choices": [], "usage": _usage(generation)}


def _completion_chunks(generation: Generation, tokenizer: Any, logprobs: bool, include_usage: bool) -> Iterator[dict[str, Any]]:
    head = {"id": generation.id, "object": "text_completion", "created": generation.created, "model": generation.model}
    for choice in generation.choices:
        offset = len(generation.prompt_text)
        for i, delta in enumerate(text_deltas(choice, tokenizer)):
            token = choice.token_ids[i]
            yield {**head, "choices": [{
                "index": choice.index,
                "text": delta,
                "logprobs": _completion_logprobs(choice, tokenizer, offset, i, 1) if logprobs else None,
                "finish_reason": None,
                "token_ids": [token],
            }], **_extensions(generation)}  # fmt: skip
            offset += len(tokenizer.decode([token], skip_special_tokens=False))
        yield {**head, "choices": [{"index": choice.index, "text": "", "logprobs": None, "finish_reason": choice.finish_reason}]}
    if include_usage:
        yield {**head, "choices": [], "usage": _usage(generation)}
