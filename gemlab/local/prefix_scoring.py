"""Teacher-forced logprobs of a batch whose sequences share a prefix, computed with that prefix
run once: the training counterpart of ``prefill.py``.

Every datum of an RL step starts with the same template preamble and game introduction (often
most of its tokens). The prefix runs once, as a batch of one, with gradients; its KV cache is
repeated for every row, and only the rows' own suffixes run batched. The prefix's logprobs are
shared by every row, so autograd adds up each row's gradient through them: the loss and its
gradient are those of the plain pass, up to float rounding (other matmul shapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from gemlab.local import kv_cache
from gemlab.local.prefill import MIN_SHARED_TOKENS, shared_prefix_length, worth_sharing


def shared_scoring_length(inputs: Sequence[Sequence[int]], targets: Sequence[torch.Tensor]) -> int:
    """Positions whose inputs (and targets) are the same in every row, leaving each row at least
    one position of its own; 0 when too few to be worth a separate pass."""
    if len(inputs) < 2 or any(t.ndim != 1 for t in targets):
        return 0
    length = shared_prefix_length(inputs)
    first = targets[0]
    while length and not all(torch.equal(t[:length], first[:length]) for t in targets[1:]):
        length -= 1  # the targets of a shared input may still differ (e.g. the first action token)
    return length if length >= MIN_SHARED_TOKENS else 0


def scored_lengths(model: Any, inputs: Sequence[Sequence[int]]) -> list[int]:
    """Positions of each row that get logits of their own: all of them, or those after the prefix
    that every row shares when ``model`` is large enough to share it (for sizing micro-batches)."""
    shared = shared_prefix_length(inputs) if worth_sharing(model) and len(inputs) > 1 else 0
    shared = shared if shared >= MIN_SHARED_TOKENS else 0
    return [len(seq) - shared for seq in inputs]


def target_logprobs_shared(
    model: Any, inputs: Sequence[Sequence[int]], targets: Sequence[torch.Tensor], pad_id: int, shared: int
) -> list[torch.Tensor]:
    """``scoring.target_logprobs`` with the first ``shared`` positions run once (see the module)."""
    device = model.device
    prefix = torch.as_tensor([list(inputs[0][:shared])], dtype=torch.long, device=device)
    out, cache = kv_cache.forward(model, input_ids=prefix)
    prefix_lp = -F.cross_entropy(out.logits[0].float(), targets[0][:shared].to(device), reduction="none")
    cache.batch_repeat_interleave(len(inputs))
    lengths = [len(seq) - shared for seq in inputs]
    width = max(lengths)
    ids = torch.full((len(inputs), width), pad_id, dtype=torch.long)
    labels = torch.zeros((len(inputs), width), dtype=torch.long)
    for row, (seq, target) in enumerate(zip(inputs, targets)):
        ids[row, : lengths[row]] = torch.as_tensor(seq[shared:], dtype=torch.long)
        labels[row, : lengths[row]] = target[shared:]
    positions = torch.arange(shared, shared + width, device=device).expand(len(inputs), width)
    # right padding: under the causal mask it never changes the tokens before it
    logits = kv_cache.forward(model, cache, input_ids=ids.to(device), position_ids=positions)[0].logits.float()
    nll = F.cross_entropy(logits.transpose(1, 2), labels.to(device), reduction="none")
    return [torch.cat([prefix_lp, -nll[row, :length]]) for row, length in enumerate(lengths)]
