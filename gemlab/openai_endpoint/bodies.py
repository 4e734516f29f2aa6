"""OpenAI's response bodies and stream chunks for a ``Generation``, with gemlab's extensions
(``token_ids``, ``prompt_token_ids``, ``sampler_version``; see ``app.py``). These block
(tokenizers): the routes build them on worker threads."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

from fastapi.responses import StreamingResponse

from gemlab.openai_endpoint.completions import Choice, Generation, text_deltas, token_pieces


def model_card(name: str, created: int) -> dict[str, Any]:
    """An entry of ``/v1/models``."""
    return {"id": name, "object": "model", "created": created, "owned_by": "gemlab"}


def _usage(generation: Generation) -> dict[str, int]:
    completion = sum(len(c.token_ids) for c in generation.choices)
    prompt = len(generation.prompt_token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _alternatives(top: list[tuple[int, float]], tokenizer: Any) -> list[dict[str, Any]]:
    pieces = token_pieces([t for t, _ in top], tokenizer)
    return [
        {"token": p, "logprob": lp, "bytes": list(p.encode("utf-8"))} for p, (_, lp) in zip(pieces, top, strict=True)
    ]


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
            {
                "token": piece,
                "logprob": lp,
                "bytes": list(piece.encode("utf-8")),
                "top_logprobs": _alternatives(top, tokenizer),
            }
            for piece, lp, top in zip(pieces, logprobs, _top(choice, start, count), strict=True)
        ],
        "refusal": None,
    }


def _completion_logprobs(
    choice: Choice, tokenizer: Any, offset: int, start: int = 0, count: int | None = None
) -> dict[str, Any]:
    count = len(choice.token_ids) - start if count is None else count
    pieces = token_pieces(choice.token_ids[start : start + count], tokenizer)
    offsets = []
    for piece in pieces:
        offsets.append(offset)
        offset += len(piece)
    top = None
    if choice.top_logprobs is not None:
        top = [{a["token"]: a["logprob"] for a in _alternatives(row, tokenizer)} for row in _top(choice, start, count)]
    return {
        "tokens": pieces,
        "token_logprobs": choice.logprobs[start : start + count],
        "top_logprobs": top,
        "text_offset": offsets,
    }


def _extensions(generation: Generation) -> dict[str, Any]:
    return {"prompt_token_ids": generation.prompt_token_ids, "sampler_version": generation.sampler_version}


def _message(choice: Choice) -> dict[str, Any]:
    if choice.tool_calls:
        return {"role": "assistant", "content": choice.content, "tool_calls": choice.tool_calls}
    return {"role": "assistant", "content": choice.text}


def chat_response(generation: Generation, tokenizer: Any, logprobs: bool) -> dict[str, Any]:
    """A ``chat.completion``."""
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


def completion_response(generation: Generation, tokenizer: Any, logprobs: bool) -> dict[str, Any]:
    """A ``text_completion``."""
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
def sse(chunks: list[dict[str, Any]]) -> StreamingResponse:
    """``chunks`` as server-sent events, ending in ``data: [DONE]``."""

    async def events() -> AsyncIterator[str]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


def chat_chunks(
    generation: Generation, tokenizer: Any, logprobs: bool, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """A streamed ``chat.completion.chunk`` sequence: per choice its role, each token's text (a tool call whole), its
    finish."""
    head = {
        "id": generation.id,
        "object": "chat.completion.chunk",
        "created": generation.created,
        "model": generation.model,
    }
    for choice in generation.choices:
        yield {
            **head,
            "choices": [
                {
                    "index": choice.index,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
            **_extensions(generation),
        }
        if choice.tool_calls:  # the content before the calls, then each call whole
            if choice.content:
                yield {
                    **head,
                    "choices": [
                        {
                            "index": choice.index,
                            "delta": {"content": choice.content},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                }
            calls = [{"index": i, **call} for i, call in enumerate(choice.tool_calls)]
            delta = {
                "index": choice.index,
                "delta": {"tool_calls": calls},
                "logprobs": _chat_logprobs(choice, tokenizer) if logprobs else None,
            }
            yield {**head, "choices": [{**delta, "finish_reason": None, "token_ids": choice.token_ids}]}
        else:
            for i, text_delta in enumerate(text_deltas(choice, tokenizer)):
                yield {**head, "choices": [{
                    "index": choice.index,
                    "delta": {"content": text_delta},
                    "logprobs": _chat_logprobs(choice, tokenizer, i, 1) if logprobs else None,
                    "finish_reason": None,
                    "token_ids": [choice.token_ids[i]],
                }]}  # fmt: skip
        yield {
            **head,
            "choices": [{"index": choice.index, "delta": {}, "logprobs": None, "finish_reason": choice.finish_reason}],
        }
    if include_usage:
        yield {**head, "choices": [], "usage": _usage(generation)}


def completion_chunks(
    generation: Generation, tokenizer: Any, logprobs: bool, include_usage: bool
) -> Iterator[dict[str, Any]]:
    """A streamed ``text_completion`` sequence: per choice each token's text, then its finish."""
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
        yield {
            **head,
            "choices": [{"index": choice.index, "text": "", "logprobs": None, "finish_reason": choice.finish_reason}],
        }
    if include_usage:
        yield {**head, "choices": [], "usage": _usage(generation)}
