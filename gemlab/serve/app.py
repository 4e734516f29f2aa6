"""An OpenAI-compatible HTTP endpoint (FastAPI) over any Tinker ``SamplingClient``.

Routes: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions`` (both also
with ``"stream": true``, as server-sent events ending in ``data: [DONE]``), ``GET /health``.

Extensions to OpenAI's response format, for training on what was sampled:

- ``choices[i].token_ids``: the sampled token ids, end-of-turn/stop token included (for a
  streamed chunk, the ids of that chunk);
- ``prompt_token_ids``: the prompt exactly as the model saw it (chat template applied);
- ``sampler_version``: the weights version that sampled it (see ``SamplerSlot.set``).

``logprobs`` follow OpenAI's formats (chat: ``logprobs.content[*].{token, logprob, bytes}``;
completions: ``logprobs.{tokens, token_logprobs, text_offset}``) with one entry per sampled
token, aligned with ``token_ids``; top alternatives are not available (``top_logprobs`` empty).
Errors are OpenAI's JSON shape: 400 malformed body or unsupported field, 404 unknown model or
route, 400 with code ``context_length_exceeded`` when ``max_tokens`` does not fit, 500 if the
sampler fails. The local backend returns a sample whole, so a stream's chunks all follow the
end of sampling.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gemlab.serve.completions import (
    Choice,
    Generation,
    SamplerSlot,
    chat_prompt,
    completion_prompt,
    generate,
    new_id,
    text_deltas,
    token_pieces,
)
from gemlab.serve.recorder import Recorder
from gemlab.serve.schemas import ChatCompletionRequest, CompletionRequest, OpenAIError


def create_app(sampler: Any, *, model_name: str, recorder: Recorder | None = None) -> FastAPI:
    """The endpoint serving ``sampler`` (a ``SamplingClient`` or a ``SamplerSlot`` to swap
    weights through) under the model id ``model_name``; every request lands in ``recorder``."""
    slot = sampler if isinstance(sampler, SamplerSlot) else SamplerSlot(sampler)
    app = FastAPI(title="gemlab OpenAI-compatible endpoint")
    app.state.slot, app.state.recorder, app.state.model_name = slot, recorder, model_name
    created = int(time.time())

    def tokenizer() -> Any:
        return slot.get()[0].get_tokenizer()

    def check_model(name: str) -> None:
        if name != model_name:
            raise OpenAIError(
                404, f"The model {name!r} does not exist; this server serves {model_name!r}", param="model", code="model_not_found"
            )

    @app.exception_handler(OpenAIError)
    async def _openai_error(request: Request, exc: OpenAIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _malformed(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
        message = f"malformed request body: {first.get('msg', 'invalid')}" + (f" at {where!r}" if where else "")
        return JSONResponse(OpenAIError(400, message, param=where or None).body(), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        return JSONResponse(OpenAIError(exc.status_code, str(exc.detail), code=code).body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _server_error(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(OpenAIError(500, f"internal error: {exc!r}", type="server_error").body(), status_code=500)

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
        tok = tokenizer()
        prompt, text, messages = chat_prompt(body, tok)
        choices, version = await generate(slot, body, prompt, tokenizer=tok, chat=True)
        generation = Generation(
            id=new_id("chatcmpl"), kind="chat", created=int(time.time()), model=model_name,
            prompt_token_ids=prompt, choices=choices, sampler_version=version, messages=messages, prompt_text=text,
        )  # fmt: skip
        if recorder is not None:
            recorder.add(generation)
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return _sse(_chat_chunks(generation, tok, body.logprobs, include_usage))
        return _chat_response(generation, tok, body.logprobs)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> Any:
        check_model(body.model)
        body.refuse_unsupported()
        tok = tokenizer()
        prompt, text = completion_prompt(body, tok, _vocab_size(tok))
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
            return _sse(_completion_chunks(generation, tok, logprobs, include_usage))
        return _completion_response(generation, tok, logprobs)

    return app


# ----- response bodies --------------------------------------------------------------------
def _model_card(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "gemlab"}


def _vocab_size(tokenizer: Any) -> int:
    return len(tokenizer)


def _usage(generation: Generation) -> dict[str, int]:
    completion = sum(len(c.token_ids) for c in generation.choices)
    prompt = len(generation.prompt_token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _chat_logprobs(token_ids: list[int], logprobs: list[float], tokenizer: Any) -> dict[str, Any]:
    pieces = token_pieces(token_ids, tokenizer)
    return {
        "content": [
            {"token": piece, "logprob": lp, "bytes": list(piece.encode("utf-8")), "top_logprobs": []}
            for piece, lp in zip(pieces, logprobs)
        ],
        "refusal": None,
    }


def _completion_logprobs(token_ids: list[int], logprobs: list[float], tokenizer: Any, offset: int) -> dict[str, Any]:
    pieces = token_pieces(token_ids, tokenizer)
    offsets = []
    for piece in pieces:
        offsets.append(offset)
        offset += len(piece)
    return {"tokens": pieces, "token_logprobs": logprobs, "top_logprobs": None, "text_offset": offsets}


def _extensions(generation: Generation) -> dict[str, Any]:
    return {"prompt_token_ids": generation.prompt_token_ids, "sampler_version": generation.sampler_version}


def _chat_response(generation: Generation, tokenizer: Any, logprobs: bool) -> dict[str, Any]:
    choices = [
        {
            "index": c.index,
            "message": {"role": "assistant", "content": c.text},
            "logprobs": _chat_logprobs(c.token_ids, c.logprobs, tokenizer) if logprobs else None,
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
            "logprobs": _completion_logprobs(c.token_ids, c.logprobs, tokenizer, offset) if logprobs else None,
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
def _sse(chunks: Iterator[dict[str, Any]]) -> StreamingResponse:
    async def events() -> AsyncIterator[str]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def _per_token(choice: Choice, tokenizer: Any) -> Iterator[tuple[str, int, float]]:
    yield from zip(text_deltas(choice, tokenizer), choice.token_ids, choice.logprobs)


def _chat_chunks(generation: Generation, tokenizer: Any, logprobs: bool, include_usage: bool) -> Iterator[dict[str, Any]]:
    head = {"id": generation.id, "object": "chat.completion.chunk", "created": generation.created, "model": generation.model}
    for choice in generation.choices:
        yield {**head, "choices": [{"index": choice.index, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}], **_extensions(generation)}
        for delta, token, lp in _per_token(choice, tokenizer):
            yield {**head, "choices": [{
                "index": choice.index,
                "delta": {"content": delta},
                "logprobs": _chat_logprobs([token], [lp], tokenizer) if logprobs else None,
                "finish_reason": None,
                "token_ids": [token],
            }]}  # fmt: skip
        yield {**head, "choices": [{"index": choice.index, "delta": {}, "logprobs": None, "finish_reason": choice.finish_reason}]}
    if include_usage:
        yield {**head, "choices": [], "usage": _usage(generation)}


def _completion_chunks(generation: Generation, tokenizer: Any, logprobs: bool, include_usage: bool) -> Iterator[dict[str, Any]]:
    head = {"id": generation.id, "object": "text_completion", "created": generation.created, "model": generation.model}
    for choice in generation.choices:
        offset = len(generation.prompt_text)
        for delta, token, lp in _per_token(choice, tokenizer):
            yield {**head, "choices": [{
                "index": choice.index,
                "text": delta,
                "logprobs": _completion_logprobs([token], [lp], tokenizer, offset) if logprobs else None,
                "finish_reason": None,
                "token_ids": [token],
            }], **_extensions(generation)}  # fmt: skip
            offset += len(tokenizer.decode([token], skip_special_tokens=False))
        yield {**head, "choices": [{"index": choice.index, "text": "", "logprobs": None, "finish_reason": choice.finish_reason}]}
    if include_usage:
        yield {**head, "choices": [], "usage": _usage(generation)}
