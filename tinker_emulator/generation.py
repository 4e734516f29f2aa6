"""Batched generation with a KV cache, and the queue that batches concurrent requests.

``generate`` runs many rows (one per sample of each request) in one left-padded batch:
attention mask and position ids keep every row's result what it would be alone, and each row
draws from its own ``torch.Generator``, so a request's randomness depends on its seed only,
never on which requests it was batched with. Rows leave the batch (and the KV cache) when
they finish. Given a ``turn_cache.Memory``, a row whose prompt extends a sequence generated
earlier (an episode's previous turn) prefills only its new tokens.

What a row returns, matching Tinker:

- ``logprobs[i]`` is the log-probability of ``tokens[i]`` under the distribution it was drawn
  from after temperature scaling, ``log_softmax(logits / temperature)``, over the whole
  vocabulary (top-k/top-p truncation is not renormalized). At temperature 1 that is exactly
  the training logprob of the same weights. Temperature 0 means greedy, with the plain
  ``log_softmax(logits)`` logprob.
- ``top_ids[i]`` and ``top_logprobs[i]`` (when a row asks for ``top_logprobs = k``) are the ``k``
  most likely tokens at position ``i`` under that same distribution, most likely first, with their
  logprobs (Tinker's ``topk_sample_logprobs``): when greedy, the first is the sampled token.
- The stop token, or the tokens that complete a stop string, are included in ``tokens``;
  ``stop_reason`` is ``"stop"`` then, ``"length"`` when ``max_tokens`` ran out.
- ``stop=None`` stops at the model's EOS tokens; a list of strings or token ids stops there too,
  as well as at EOS; ``[]`` disables stopping (tinker 0.38's semantics).

``SampleBatcher`` collects requests: each ``sample`` call queues one, and a flush is
scheduled on the caller's event loop only once the queue stops growing for a loop iteration,
so e.g. 32 coroutines under ``asyncio.gather`` become one ``generate`` call.
"""

from __future__ import annotations

import asyncio
import functools
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from tinker_emulator import kv_cache
from tinker_emulator.decoding import Decoder
from tinker_emulator.futures import LANE, SAMPLING, Worker, get_worker, on_a_worker_thread
from tinker_emulator.prefill import prefill, worth_sharing
from tinker_emulator.turn_cache import Memory

# Rows generated together at most (bounds the KV cache of big models).
MAX_ROWS = 64
# A generation call's own cost in positions of prompt: what one more batch adds to sampling. Its
# decoding steps' fixed part: SmolLM2-135M decodes a lone row in about 20 ms a token, so 48 tokens
# cost about what 2,000 positions of its prompt pass do on a 2-core CPU; twice that, since a
# prompt's positions often cost less than they count here (shared prefixes and kept turns run once).
CALL_POSITIONS = 4096
# Loop iterations a flush may wait for more requests before it runs anyway.
MAX_SETTLE_HOPS = 64


@dataclass
class Row:
    """One sequence to generate and how."""

    prompt: Sequence[int]
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    generator: torch.Generator
    top_logprobs: int = 0  # k most likely tokens to report at each position (0: none)


@dataclass
class RowResult:
    """What a row generated."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: str = "length"
    top_ids: list[list[int]] = field(default_factory=list)  # per position, when the row asked for top_logprobs
    top_logprobs: list[list[float]] = field(default_factory=list)


def choose_tokens(
    logits: torch.Tensor, rows: Sequence[Row]
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """Next token of each row (temperature, top-k, top-p, its own generator), its logprob, and
    the most likely tokens with their logprobs (as many as the most any row asks for; ``None``
    when no row asks)."""
    device = logits.device
    temperature = torch.tensor([r.temperature for r in rows], device=device)
    greedy = temperature <= 0
    scale = torch.where(greedy, 1.0, temperature)
    logprobs = torch.log_softmax(logits if bool((scale == 1).all()) else logits / scale[:, None], dim=-1)  # x / 1 is x
    probs = logprobs.exp()
    top_k = torch.tensor([min(r.top_k, probs.shape[-1]) if r.top_k > 0 else 0 for r in rows], device=device)
    if bool((top_k > 0).any()):
        kth = probs.topk(int(top_k.max()), dim=-1).values
        threshold = kth.gather(-1, (top_k.clamp(min=1) - 1)[:, None])
        probs = torch.where((top_k[:, None] == 0) | (probs >= threshold), probs, 0.0)
    top_p = torch.tensor([r.top_p for r in rows], device=device)
    if bool((top_p < 1).any()):
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs
        limit = torch.where(top_p < 1, top_p * sorted_probs.sum(-1), torch.inf)[:, None]
        drop = before >= limit
        drop[:, 0] = False
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs.masked_fill(drop, 0.0))
    uniform = torch.cat([torch.rand(1, generator=r.generator) for r in rows]).to(device)
    cdf = probs.cumsum(-1)
    drawn = torch.searchsorted(cdf, (uniform * cdf[:, -1])[:, None], right=True)[:, 0]
    tokens = drawn.clamp(max=probs.shape[-1] - 1)
    if bool(greedy.any()):
        tokens = torch.where(greedy, logits.argmax(-1), tokens)
    most = min(max(r.top_logprobs for r in rows), logprobs.shape[-1])
    top = logprobs.topk(most, dim=-1) if most > 0 else None
    return tokens, logprobs.gather(-1, tokens[:, None])[:, 0], None if top is None else (top.indices, top.values)


def generation_batches(lengths: Sequence[int], max_rows: int = MAX_ROWS) -> list[list[int]]:
    """Indices of prompts of these lengths in batches of at most ``max_rows``, shortest first, cut
    where padding every row of a batch to its longest costs more than one more call
    (``CALL_POSITIONS``): a tool's 700-token reply then no longer pads the other rows' prompt pass
    and keys and values, which it did to 63 rows of 250 tokens in a tool step."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    cost, start = [0] + [math.inf] * len(order), [0] * (len(order) + 1)
    for end in range(1, len(order) + 1):  # the cheapest cuts of order[:end], the last batch order[i:end]
        for i in range(max(0, end - max_rows), end):
            total = cost[i] + CALL_POSITIONS + (end - i) * lengths[order[end - 1]]
            if total < cost[end]:
                cost[end], start[end] = total, i
    batches, end = [], len(order)
    while end:
        batches.append(order[start[end] : end])
        end = start[end]
    return batches[::-1]


def _hit_stop_string(row: Row, tokens: list[int], decode: Callable[[list[int]], str]) -> bool:
    window = 4 * max(len(s) for s in row.stop_strings) + 2
    text = decode(tokens[-window:])
    return any(s in text for s in row.stop_strings)


@torch.inference_mode()
def generate(
    model: Any,
    rows: Sequence[Row],
    pad_id: int,
    decode: Callable[[list[int]], str],
    memory: Memory | None = None,
    decoder: Decoder | None = None,
) -> list[RowResult]:
    """Sample every row to its end in one batch with a KV cache (the prompts' shared prefix
    computed once, see ``prefill.py``). With a ``memory`` of earlier turns (``turn_cache.py``), a
    prompt that extends a sequence kept there starts from its keys and values, and every row's
    own are kept there when it ends. A ``decoder`` (``decoding.py``) runs the prompt pass and the
    decoding steps in place of the Hugging Face model."""
    device = model.device
    prompts = [row.prompt for row in rows]
    known = [memory.find(prompt) for prompt in prompts] if memory is not None else None
    cache, logits, mask, next_position = prefill(
        model, prompts, pad_id, share=worth_sharing(model), known=known, decoder=decoder
    )
    results = [RowResult() for _ in rows]
    live = list(range(len(rows)))  # batch row -> index into rows
    while True:
        live_rows = [rows[i] for i in live]
        tokens, logprobs, top = choose_tokens(logits, live_rows)
        if top is not None:
            top_ids, top_logprobs = top[0].tolist(), top[1].tolist()
            for j, index in enumerate(live):
                k = rows[index].top_logprobs
                if k:
                    results[index].top_ids.append(top_ids[j][:k])
                    results[index].top_logprobs.append(top_logprobs[j][:k])
        keep = []
        for j, (index, token, logprob) in enumerate(zip(live, tokens.tolist(), logprobs.tolist(), strict=True)):
            row, result = rows[index], results[index]
            result.tokens.append(token)
            result.logprobs.append(logprob)
            if token in row.stop_ids or (row.stop_strings and _hit_stop_string(row, result.tokens, decode)):
                result.stop_reason = "stop"
            elif len(result.tokens) < row.max_tokens:
                keep.append(j)
                continue
            if memory is not None:  # the row's prompt and tokens but the last, which was never fed
                memory.keep([*row.prompt, *result.tokens[:-1]], kv_cache.row(cache, j, mask[j].nonzero()[:, 0]))
        if not keep:
            return results
        if len(keep) < len(live):
            kept = torch.tensor(keep, device=device)
            cache.reorder_cache(kept)
            tokens, mask, next_position = tokens[kept], mask[kept], next_position[kept]
            live = [live[j] for j in keep]
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
        if decoder is not None:
            logits = decoder.step(cache, tokens, mask, next_position)
        else:
            out, cache = kv_cache.forward(
                model, cache, input_ids=tokens[:, None], attention_mask=mask, position_ids=next_position[:, None]
            )
            logits = out.logits[:, -1].float()
        next_position = next_position + 1


@dataclass
class Request:
    """A queued piece of sampling work: requests with the same ``group`` key run together in one
    ``run_group`` call, on ``worker``."""

    group: Any
    payload: Any
    future: Future = field(default_factory=Future)
    worker: Worker | None = None  # whose model copy it runs on (None: the sampling worker)
    lane: Any = field(default_factory=LANE.get)  # its lane on ``worker``: the submitter's


class SampleBatcher:
    """Collects sampling requests and runs each flush's worth as one batch per group, on the
    sampling worker (or, for a group on the training model's copy, on the training worker)."""

    def __init__(self, run_group: Callable[[list[Request]], list[Any]]) -> None:
        self._run_group = run_group
        self._pending: list[Request] = []
        self._lock = threading.Lock()
        self._flush_queued = False
        self._settling: set[asyncio.AbstractEventLoop] = set()

    def submit(self, request: Request) -> Future:
        """Queue ``request``; it runs with every other request queued before the next flush."""
        with self._lock:
            self._pending.append(request)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or on_a_worker_thread():
            self.flush()
        elif loop not in self._settling:
            self._settling.add(loop)
            loop.call_soon(self._settle, loop, 0, -1)
        return request.future

    def flush(self) -> None:
        """Run what is queued as soon as the worker is free (blocking waits call this first)."""
        with self._lock:
            if not self._pending or self._flush_queued:
                return
            self._flush_queued = True
        get_worker(SAMPLING).submit(self._run)

    def _settle(self, loop: asyncio.AbstractEventLoop, hops: int, last_count: int) -> None:
        with self._lock:
            count = len(self._pending)
        if count != last_count and hops < MAX_SETTLE_HOPS:
            loop.call_soon(self._settle, loop, hops + 1, count)
            return
        self._settling.discard(loop)
        self.flush()

    def _run(self) -> None:
        with self._lock:
            batch, self._pending, self._flush_queued = self._pending, [], False
        batch = [r for r in batch if r.future.set_running_or_notify_cancel()]  # skip cancelled waits
        groups: dict[Any, list[Request]] = {}
        for request in batch:
            groups.setdefault(request.group, []).append(request)
        for requests in groups.values():
            worker = requests[0].worker
            if worker is None or worker.on_worker_thread():
                self._run_requests(requests)
            else:
                worker.submit(functools.partial(self._run_requests, requests), requests[0].lane)

    def _run_requests(self, requests: list[Request]) -> None:
        try:
            results = self._run_group(requests)
        except BaseException as exc:  # every request of the group gets the error
            for request in requests:
                request.future.set_exception(exc)
        else:
            for request, result in zip(requests, results, strict=True):
                request.future.set_result(result)
