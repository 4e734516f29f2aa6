"""Teacher-forced logprobs of target tokens: what training differentiates and what
``compute_logprobs`` returns, from one code path so the two always agree."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from tinker_emulator import kv_cache
from tinker_emulator.prefill import worth_sharing
from tinker_emulator.prefix_scoring import (
    Cluster,
    SharedPrefixes,
    head_logprobs,
    micro_batches,
    sharing_plan,
    target_logprobs,
)

# Logits of one micro-batch stay under about this many floats (64 MB in float32; a pass holds a few
# tensors of that size: the logits, their log-softmax and its gradient), so a 49k-token vocabulary
# (SmolLM2) trains on long sequences in little memory: a preset=smollm2 run peaked at 3.2-3.4 GB
# with this bound, 4.6-4.8 GB with 256 MB (the warm-up and 3 RL steps; 2.8-3.1 GB since prefixes
# are shared across micro-batches: research/experiments/memory_smollm2.py).
MAX_LOGIT_FLOATS = 1 << 24
# The logits of a large model's pass (``head_logprobs``) are computed this many floats at a time
# (4 MB in float32): blocks under the allocator's mmap threshold (``memory.MMAP_THRESHOLD``) are
# reused from the heap instead of mapped and zeroed afresh. A tool step's forward_backward took
# 22.7 s in blocks of this size against 34.4 s in 64 MB blocks (2-core AMD EPYC), 3.24 GB at its
# peak against 3.17.
HEAD_BLOCK_FLOATS = 1 << 20
# Positions of one training pass of a model large enough to share prefixes (``worth_sharing``):
# its logits are computed HEAD_BLOCK_FLOATS at a time and not kept (``head_logprobs``), so what
# bounds a pass is the rest of the model's activations; on SmolLM2 a pass of this many positions
# runs its matmuls on rows of many sequences at once instead of one (the logits bound alone allowed
# 341 positions: a multi-turn step's 230-token datums went one to a pass).
MAX_PASS_POSITIONS = 1024


def scored_batches(
    model: Any, inputs: Sequence[Sequence[int]], targets: Sequence[torch.Tensor], pad_id: int, vocab_size: int
) -> Iterator[tuple[list[int], list[torch.Tensor]]]:
    """``(rows, logprobs)`` per micro-batch, ``log p(targets[i][t] | inputs[i][: t + 1])`` for each
    row ``i`` of it (a 2-D ``(N, K)`` target gives ``(N, K)``); every row comes once, not in order.
    Gradients flow when grad mode is on: the caller runs each micro-batch's backward before asking
    for the next. Prefixes that rows share run once on models large enough for it to pay
    (``prefix_scoring.py``), however many micro-batches their rows take; the other rows run plain."""
    chunk = max(1, MAX_LOGIT_FLOATS // vocab_size)
    block = max(1, HEAD_BLOCK_FLOATS // vocab_size)  # positions of a large model's logits at a time
    large = worth_sharing(model)
    # K target tokens per position (a 2-D target) need whole log-softmaxes: those passes stay within the logits bound
    by_chunks = large and all(target.ndim == 1 for target in targets)
    budget = MAX_PASS_POSITIONS if by_chunks else chunk
    clusters = sharing_plan(inputs, targets, budget) if large else [Cluster(tuple(range(len(inputs))), 0)]
    shared = [c for c in clusters if c.shared]
    # a prefix pass stays alive beside its rows' micro-batches: it takes at most half the budget,
    # and they what it leaves
    for part in micro_batches([c.shared for c in shared], budget // 2):
        prefixes = SharedPrefixes(model, inputs, targets, pad_id, [shared[k] for k in part], block)
        for rows in micro_batches(prefixes.own, budget - prefixes.positions, by_length=True):
            yield [prefixes.rows[j][1] for j in rows], prefixes.logprobs(rows)
        prefixes.backward()
    plain = [row for c in clusters if not c.shared for row in c.rows]
    for part in micro_batches([len(inputs[row]) for row in plain], budget, by_length=large):
        rows = [plain[j] for j in part]
        yield (
            rows,
            _plain_logprobs(
                model,
                [inputs[r] for r in rows],
                [targets[r] for r in rows],
                pad_id,
                large,
                block if by_chunks else None,
            ),
        )


def _plain_logprobs(
    model: Any,
    inputs: Sequence[Sequence[int]],
    targets: Sequence[torch.Tensor],
    pad_id: int,
    large: bool,
    chunk: int | None,
) -> list[torch.Tensor]:
    """``scored_batches``'s logprobs in one forward pass of right-padded rows (under a causal mask, padding
    after a token never changes it), the logits ``chunk`` positions at a time where ``chunk`` is
    given (``head_logprobs``). The tiny models keep the transposed cross-entropy they were
    recorded with (the same values but for float rounding; their runs repeat bit for bit)."""
    device = model.device
    lengths = [len(seq) for seq in inputs]
    width = max(lengths)
    ids = torch.full((len(inputs), width), pad_id, dtype=torch.long)
    for row, seq in enumerate(inputs):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    if any(target.ndim == 2 for target in targets):  # (N, K): K target tokens per position (never in chunks)
        logprobs = torch.log_softmax(model(input_ids=ids.to(device)).logits.float(), -1)
        return [
            logprobs[row, :length].gather(-1, target.reshape(length, -1).to(device)).reshape(target.shape)
            for row, (length, target) in enumerate(zip(lengths, targets, strict=True))
        ]
    labels = torch.zeros((len(inputs), width), dtype=torch.long)
    for row, target in enumerate(targets):
        labels[row, : len(target)] = target
    if chunk is not None:
        logprobs = head_logprobs(model, kv_cache.hidden(model, input_ids=ids.to(device))[0], labels.to(device), chunk)
    elif large:
        logprobs = target_logprobs(model(input_ids=ids.to(device)).logits, labels.to(device))
    else:
        logits = model(input_ids=ids.to(device)).logits.float()
        logprobs = -F.cross_entropy(logits.transpose(1, 2), labels.to(device), reduction="none")
    return [logprobs[row, :length] for row, length in enumerate(lengths)]
