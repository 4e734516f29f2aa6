"""Teacher-forced logprobs of target tokens: what training differentiates and what
``compute_logprobs`` returns, from one code path so the two always agree."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from gemlab.local.prefill import worth_sharing
from gemlab.local.prefix_scoring import sharing_plan, target_logprobs_shared

# Logits of one micro-batch stay under about this many floats (64 MB in float32; a pass holds a few
# tensors of that size: the logits, their log-softmax and its gradient), so a 49k-token vocabulary
# (SmolLM2) trains on long sequences in little memory: a preset=smollm2 run peaks at 3.2-3.4 GB
# with this bound, 4.6-4.8 GB with 256 MB (measured on the warm-up and 3 RL steps).
MAX_LOGIT_FLOATS = 1 << 24


def micro_batches(lengths: Sequence[int], vocab_size: int) -> Iterator[list[int]]:
    """Consecutive index groups whose padded logits fit in ``MAX_LOGIT_FLOATS``."""
    budget = max(1, MAX_LOGIT_FLOATS // vocab_size)
    group: list[int] = []
    longest = 0
    for index, length in enumerate(lengths):
        if group and max(longest, length) * (len(group) + 1) > budget:
            yield group
            group, longest = [], 0
        group.append(index)
        longest = max(longest, length)
    if group:
        yield group


def target_logprobs(
    model: Any, inputs: Sequence[Sequence[int]], targets: Sequence[torch.Tensor], pad_id: int
) -> list[torch.Tensor]:
    """``log p(targets[i][t] | inputs[i][: t + 1])`` for each sequence; a 2-D ``(N, K)`` target
    gives ``(N, K)`` logprobs. Gradients flow when grad mode is on. Prefixes that rows share run
    once on models large enough for it to pay (``prefix_scoring.py``); the other rows run in one
    plain pass."""
    clusters = sharing_plan(inputs, targets) if worth_sharing(model) else []
    logprobs = target_logprobs_shared(model, inputs, targets, pad_id, clusters) if any(c.shared for c in clusters) else {}
    plain = [row for row in range(len(inputs)) if row not in logprobs]
    if plain:
        logprobs.update(zip(plain, _plain_logprobs(model, [inputs[r] for r in plain], [targets[r] for r in plain], pad_id)))
    return [logprobs[row] for row in range(len(inputs))]


def _plain_logprobs(
    model: Any, inputs: Sequence[Sequence[int]], targets: Sequence[torch.Tensor], pad_id: int
) -> list[torch.Tensor]:
    """``target_logprobs`` in one forward pass of right-padded rows (under a causal mask, padding
    after a token never changes it)."""
    device = model.device
    lengths = [len(seq) for seq in inputs]
    width = max(lengths)
    ids = torch.full((len(inputs), width), pad_id, dtype=torch.long)
    for row, seq in enumerate(inputs):
        ids[row, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    logits = model(input_ids=ids.to(device)).logits.float()
    if any(target.ndim == 2 for target in targets):  # (N, K): K target tokens per position
        logprobs = torch.log_softmax(logits, -1)
        return [
            logprobs[row, :length].gather(-1, target.reshape(length, -1).to(device)).reshape(target.shape)
            for row, (length, target) in enumerate(zip(lengths, targets))
        ]
    labels = torch.zeros((len(inputs), width), dtype=torch.long)
    for row, target in enumerate(targets):
        labels[row, : len(target)] = target
    nll = F.cross_entropy(logits.transpose(1, 2), labels.to(device), reduction="none")
    return [-nll[row, :length] for row, length in enumerate(lengths)]
