"""Teacher-forced logprobs of a batch whose sequences share prefixes, each shared prefix run once:
the training counterpart of ``prefill.py``.

The datums of an RL step share leading tokens: every one starts with the same template preamble,
and in GRPO the answers of a group share their whole problem (often most of their tokens).
``sharing_plan`` splits the rows into clusters that share a prefix, choosing the split that
computes the fewest positions, padding included. The clusters' prefixes run once, as one batch
with gradients (right-padded); each row's cache is its cluster's, and only the rows' own suffixes
run batched, at their own positions, with the cluster's padding masked. A prefix's logprobs are
shared by its rows, so autograd adds up each row's gradient through them: the loss and its
gradient are those of the plain pass, up to float rounding (other matmul shapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from gemlab.local import kv_cache
from gemlab.local.prefill import MIN_SHARED_TOKENS, shared_prefix_length, worth_sharing


@dataclass(frozen=True)
class Cluster:
    """Rows (indices into the batch) whose first ``shared`` positions are the same, inputs and targets."""

    rows: tuple[int, ...]
    shared: int


def _common(a: Sequence[int], b: Sequence[int], ta: torch.Tensor | None, tb: torch.Tensor | None) -> int:
    """Leading positions where two rows agree in inputs and targets, leaving each a position of its own."""
    length = shared_prefix_length([a, b])
    if ta is not None and tb is not None:
        while length and not torch.equal(ta[:length], tb[:length]):
            length -= 1  # the targets of a shared input may still differ (e.g. the first action token)
    return length


def _cost(clusters: list[Cluster], lengths: Sequence[int]) -> int:
    """Positions computed, padding included: the prefix batch, the suffix batch and the rows left plain."""
    shared = [c for c in clusters if c.shared]
    plain = [r for c in clusters if not c.shared for r in c.rows]
    cost = len(plain) * max((lengths[r] for r in plain), default=0)
    if shared:
        cost += len(shared) * max(c.shared for c in shared)
        cost += sum(len(c.rows) for c in shared) * max(lengths[r] - c.shared for c in shared for r in c.rows)
    return cost


def sharing_plan(inputs: Sequence[Sequence[int]], targets: Sequence[torch.Tensor] | None = None) -> list[Cluster]:
    """Clusters of rows that share a prefix of at least ``MIN_SHARED_TOKENS`` (rows sharing none are
    clusters of one with ``shared=0``), as few positions as possible to compute. Without
    ``targets`` only inputs must agree (for sizing micro-batches)."""
    if len(inputs) < 2 or (targets is not None and any(t.ndim != 1 for t in targets)):
        return [Cluster(tuple(range(len(inputs))), 0)]
    order = sorted(range(len(inputs)), key=lambda i: list(inputs[i]))
    target = (lambda i: targets[i]) if targets is not None else (lambda i: None)
    common = [_common(inputs[a], inputs[b], target(a), target(b)) for a, b in zip(order, order[1:])]
    lengths = [len(seq) for seq in inputs]
    best = [Cluster(tuple(range(len(inputs))), 0)]
    best_cost = _cost(best, lengths)
    for threshold in sorted(set(common) - set(range(MIN_SHARED_TOKENS))):
        clusters, run, run_shared = [], [order[0]], None
        for row, length in zip(order[1:], common):
            if length >= threshold:
                run.append(row)
                run_shared = length if run_shared is None else min(run_shared, length)
            else:
                clusters.append(Cluster(tuple(run), run_shared or 0))
                run, run_shared = [row], None
        clusters.append(Cluster(tuple(run), run_shared or 0))
        cost = _cost(clusters, lengths)
        if cost < best_cost:
            best, best_cost = clusters, cost
    return best


def scored_lengths(model: Any, inputs: Sequence[Sequence[int]]) -> list[int]:
    """Positions of each row that get logits of their own: all of them, or those after the prefix
    it shares under ``sharing_plan`` when ``model`` is large enough to share (for sizing micro-batches)."""
    own = [len(seq) for seq in inputs]
    for cluster in sharing_plan(inputs) if worth_sharing(model) else []:
        for row in cluster.rows:
            own[row] -= cluster.shared
    return own


def target_logprobs_shared(
    model: Any, inputs: Sequence[Sequence[int]], targets: Sequence[torch.Tensor], pad_id: int, clusters: Sequence[Cluster]
) -> dict[int, torch.Tensor]:
    """Logprobs of the rows of ``clusters`` that share a prefix (``shared > 0``), each cluster's prefix
    run once (see the module); a dict from row index to its logprobs."""
    device = model.device
    clusters = [c for c in clusters if c.shared]
    width = max(c.shared for c in clusters)
    prefix = torch.full((len(clusters), width), pad_id, dtype=torch.long)
    prefix_labels = torch.zeros((len(clusters), width), dtype=torch.long)
    prefix_mask = torch.zeros((len(clusters), width), dtype=torch.long)
    for k, cluster in enumerate(clusters):
        first = cluster.rows[0]
        prefix[k, : cluster.shared] = torch.as_tensor(list(inputs[first][: cluster.shared]), dtype=torch.long)
        prefix_labels[k, : cluster.shared] = targets[first][: cluster.shared]
        prefix_mask[k, : cluster.shared] = 1
    # right padding: under the causal mask it never changes the tokens before it
    out, cache = kv_cache.forward(model, input_ids=prefix.to(device), attention_mask=prefix_mask.to(device))
    prefix_nll = F.cross_entropy(out.logits.float().transpose(1, 2), prefix_labels.to(device), reduction="none")
    rows = [(k, row) for k, cluster in enumerate(clusters) for row in cluster.rows]
    cache.reorder_cache(torch.as_tensor([k for k, _ in rows], device=device))  # each row gets its cluster's cache
    own = [len(inputs[row]) - clusters[k].shared for k, row in rows]
    suffix_width = max(own)
    ids = torch.full((len(rows), suffix_width), pad_id, dtype=torch.long)
    labels = torch.zeros((len(rows), suffix_width), dtype=torch.long)
    positions = torch.zeros((len(rows), suffix_width), dtype=torch.long)
    for j, (k, row) in enumerate(rows):
        shared = clusters[k].shared
        ids[j, : own[j]] = torch.as_tensor(list(inputs[row][shared:]), dtype=torch.long)
        labels[j, : own[j]] = targets[row][shared:]
        positions[j] = torch.arange(shared, shared + suffix_width)
    # the cluster's padding is masked; the suffix's own right padding is harmless (causal)
    mask = torch.cat([prefix_mask[[k for k, _ in rows]], torch.ones((len(rows), suffix_width), dtype=torch.long)], dim=1)
    out = kv_cache.forward(model, cache, input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device))[0]
    nll = F.cross_entropy(out.logits.float().transpose(1, 2), labels.to(device), reduction="none")
    return {
        row: torch.cat([-prefix_nll[k, : clusters[k].shared], -nll[j, : own[j]]]) for j, (k, row) in enumerate(rows)
    }
