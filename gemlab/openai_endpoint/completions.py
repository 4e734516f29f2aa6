"""From an OpenAI request to a Tinker ``sample`` call and back, without HTTP.

The prompt is rendered with the model's own chat template (chat) or taken as text or token ids
(completions); one ``sample`` call draws all ``n`` choices. Every choice keeps exactly what
the sampler produced, token ids and their logprobs (end-of-turn token included), because that is
what a policy-gradient update needs; the text a client sees has special tokens and stop strings
removed, as OpenAI's does.

These functions block (templates, tokenizers): the app runs them on worker threads. Their cost
is bounded before the tokenizer sees a prompt: no token covers more characters than the
vocabulary's longest entry, so a prompt longer than ``context x longest`` characters cannot fit
and is refused without being tokenized.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

from tinker import types

from gemlab.episodes import end_of_turn_ids
from gemlab.openai_endpoint.schemas import ChatCompletionRequest, CompletionRequest, OpenAIError
from gemlab.openai_endpoint.tools import parse_tool_calls, render_chat


class SamplerSlot:
    """The sampling client requests go to, and its weights version; ``set`` swaps in new weights
    while the server runs (requests already sampling finish on the client they started with)."""

    def __init__(self, client: Any, version: int = 0) -> None:
        self._lock = threading.Lock()
        self._client, self._version = client, version

    def set(self, client: Any, version: int | None = None) -> int:
        """Serve ``client`` from now on, as ``version`` (default: the previous version + 1)."""
        with self._lock:
            self._client = client
            self._version = self._version + 1 if version is None else int(version)
            return self._version

    def get(self) -> tuple[Any, int]:
        with self._lock:
            return self._client, self._version


@dataclass
class Choice:
    """One sampled completion."""

    index: int
    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str  # "stop", "length" or "tool_calls", as OpenAI names them
    top_logprobs: list[list[tuple[int, float]]] | None = None  # per sampled token, when asked for
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI's shape, when tools were offered
    content: str | None = None  # with tool calls: the text before the first call (the message's content)


@dataclass
class Generation:
    """One request's result: the prompt as sampled and every choice."""

    id: str
    kind: str  # "chat" or "completion"
    created: int
    model: str
    prompt_token_ids: list[int]
    choices: list[Choice]
    sampler_version: int
    messages: list[dict[str, str]] | None = None
    prompt_text: str = ""
    finished_at: float = field(default_factory=time.time)


def context_length(client: Any, tokenizer: Any) -> int | None:
    """The sampler's context length where it can be known (the local backend's ``context_length``,
    or the tokenizer's limit)."""
    length = getattr(client, "context_length", None)
    if isinstance(length, int):
        return length
    limit = getattr(tokenizer, "model_max_length", None)
    return int(limit) if isinstance(limit, int) and 0 < limit < 10_000_000 else None


_longest_token: dict[int, int] = {}


def longest_token(tokenizer: Any) -> int:
    """Characters in the vocabulary's longest entry: no token covers more of a prompt."""
    key = id(tokenizer)
    if key not in _longest_token:
        _longest_token[key] = max(len(piece) for piece in tokenizer.get_vocab())
    return _longest_token[key]


def check_text_fits(text: str, limit: int | None, tokenizer: Any, param: str) -> None:
    """400 ``context_length_exceeded`` for a prompt that is certainly too long, before tokenizing it."""
    if limit is not None and len(text) > limit * longest_token(tokenizer):
        raise OpenAIError(
            400,
            f"the prompt has {len(text)} characters; the context holds {limit} tokens of at most "
            f"{longest_token(tokenizer)} characters each",
            param=param,
            code="context_length_exceeded",
        )


def chat_prompt(
    request: ChatCompletionRequest, tokenizer: Any, limit: int | None
) -> tuple[list[int], str, list[dict[str, Any]]]:
    """Token ids of the conversation (and its tools) in the model's own chat template, ready for
    the reply; ``limit`` is the context length, checked before tokenizing."""
    text, messages = render_chat(request, tokenizer)
    check_text_fits(text, limit, tokenizer, "messages")
    return list(tokenizer.encode(text, add_special_tokens=False)), text, messages


def completion_prompt(request: CompletionRequest, tokenizer: Any, limit: int | None) -> tuple[list[int], str]:
    """Token ids of a completion prompt given as text or as token ids; ``limit`` is the context
    length, checked before tokenizing."""
    prompt = request.prompt
    vocab_size = len(tokenizer)
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        check_text_fits(prompt, limit, tokenizer, "prompt")
        tokens = list(tokenizer.encode(prompt, add_special_tokens=False))
        text = prompt
    else:
        prompt = cast(list[int], prompt)  # token ids: a list of strings became its first string above
        if limit is not None and len(prompt) > limit:
            raise OpenAIError(
                400,
                f"the prompt has {len(prompt)} tokens; the context holds {limit}",
                param="prompt",
                code="context_length_exceeded",
            )
        bad = [t for t in prompt if not 0 <= t < vocab_size]
        if bad:
            raise OpenAIError(
                400, f"prompt token ids {bad[:5]} are outside the vocabulary (0..{vocab_size - 1})", param="prompt"
            )
        tokens, text = list(prompt), tokenizer.decode(prompt, skip_special_tokens=False)
    if not tokens:
        raise OpenAIError(400, "the prompt is empty", param="prompt")
    return tokens, text


_ids = itertools.count()


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}{next(_ids):x}"


async def generate(
    slot: SamplerSlot,
    request: ChatCompletionRequest | CompletionRequest,
    prompt_tokens: list[int],
    *,
    tokenizer: Any,
    chat: bool,
    parse_tools: bool = False,
    stop_at_end_of_turn: bool | None = None,
) -> tuple[list[Choice], int]:
    """Sample ``request.n`` choices of ``prompt_tokens`` from the slot's current client, with
    the top ``request.top_k`` alternatives of each sampled token when asked (Tinker's
    ``topk_sample_logprobs``), and tool calls parsed from the text when ``parse_tools``.
    Sampling stops at the model's end-of-turn tokens when ``stop_at_end_of_turn`` (by default:
    for chat, and always when the request has stop strings)."""
    client, version = slot.get()
    limit = context_length(client, tokenizer)
    max_tokens = request.token_limit
    if limit is not None:
        room = limit - len(prompt_tokens)
        if room < 1:
            raise OpenAIError(
                400,
                f"the prompt has {len(prompt_tokens)} tokens; the context holds {limit}",
                param="messages" if chat else "prompt",
                code="context_length_exceeded",
            )
        if max_tokens is None:
            max_tokens = room
        elif max_tokens > room:
            raise OpenAIError(
                400,
                f"max_tokens={max_tokens} does not fit: the prompt has {len(prompt_tokens)} tokens and the "
                f"context holds {limit} (at most {room} new tokens)",
                param="max_tokens",
                code="context_length_exceeded",
            )
    user_stops = cast(list[str], request.stop or [])  # the schema's validator makes stop a list
    eot = end_of_turn_ids(tokenizer)
    stop: Any
    if user_stops:  # Tinker takes token ids or strings, not both: end-of-turn tokens as their text
        stop = [tokenizer.decode([t], skip_special_tokens=False) for t in eot] + user_stops
    else:
        stop = eot if (chat if stop_at_end_of_turn is None else stop_at_end_of_turn) else None
    params = types.SamplingParams(
        max_tokens=max_tokens, temperature=request.temperature, top_p=request.top_p, stop=stop, seed=request.seed
    )
    top_k = request.top_k
    prompt = types.ModelInput.from_ints(prompt_tokens)
    try:
        future = client.sample(prompt, request.n, params, **({"topk_sample_logprobs": top_k} if top_k else {}))
        # shielded: a client that disconnects cancels its handler, never the batch it shares
        response = await asyncio.shield(future.result_async())
    except (ValueError, TypeError) as exc:
        raise OpenAIError(400, str(exc)) from exc
    except OpenAIError:
        raise
    except Exception as exc:
        status = getattr(exc, "status_code", None)
        if isinstance(status, int) and 400 <= status < 500:
            raise OpenAIError(status, str(exc)) from exc
        raise OpenAIError(500, f"sampling failed: {exc}", type="server_error") from exc
    choices = []
    for index, sequence in enumerate(response.sequences):
        tokens = [int(t) for t in sequence.tokens]
        text = tokenizer.decode(tokens, skip_special_tokens=True)
        if user_stops and sequence.stop_reason == "stop":
            cuts = [text.find(s) for s in user_stops if s in text]
            text = text[: min(cuts)] if cuts else text
        finish = "stop" if sequence.stop_reason == "stop" else "length"
        content: str | None = None
        calls: list[dict[str, Any]] = []
        if parse_tools:
            content, calls = parse_tool_calls(
                tokenizer.decode(tokens, skip_special_tokens=False), tokenizer.all_special_tokens
            )
            finish = "tool_calls" if calls else finish
        top = getattr(sequence, "topk_logprobs", None) if top_k else None
        choices.append(
            Choice(
                index=index,
                token_ids=tokens,
                logprobs=[float(x) for x in (sequence.logprobs or [])],
                text=text,
                finish_reason=finish,
                top_logprobs=[[(int(t), float(lp)) for t, lp in (row or [])] for row in top]
                if top is not None
                else None,
                tool_calls=calls,
                content=content,
            )
        )
    return choices, version


def token_pieces(token_ids: list[int], tokenizer: Any) -> list[str]:
    """The text of each token on its own (special tokens spelled out), for OpenAI's logprobs."""
    return [tokenizer.decode([t], skip_special_tokens=False) for t in token_ids]


def text_deltas(choice: Choice, tokenizer: Any) -> list[str]:
    """The visible text split per sampled token, for streaming: the deltas add up to ``choice.text``."""
    deltas, shown = [], 0
    for i in range(1, len(choice.token_ids) + 1):
        prefix = tokenizer.decode(choice.token_ids[:i], skip_special_tokens=True)[: len(choice.text)]
        deltas.append(prefix[shown:] if len(prefix) > shown else "")
        shown = max(shown, len(prefix))
    if deltas:
        deltas[-1] += choice.text[shown:]
    return deltas
