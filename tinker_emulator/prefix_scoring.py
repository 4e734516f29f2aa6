"""Teacher-forced logprobs of a batch whose sequences share prefixes, each shared prefix run once:
the training counterpart of ``prefill.py``.

The datums of an RL step share leading tokens: every one starts with the same template preamble,
and in GRPO the answers of a group share their whole problem (often most of their tokens).
``sharing_plan`` splits the rows into clusters that share a prefix, choosing the split that
computes the fewest positions, padding included. The clusters' prefixes run once, as one batch
with gradients (right-padded); each row's cache is its cluster's, and only the rows' own suffixes
run, in micro-batches of any size, at their own positions, with the cluster's padding masked. A
prefix's logprobs and cache are shared by its rows, so the gradients of every row through them add
up before they run back through the prefix once: the loss and its gradient are those of the plain
pass, up to float rounding (other matmul shapes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from tinker_emulator import kv_cache
from tinker_emulator.prefill import MIN_SHARED_TOKENS, shared_prefix_length


def target_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., labels]`` in float32, per position, from ``(batch, positions, vocab)``
    logits: one contiguous row per position (the softmax over the last dimension runs about 4x
    as fast as over the class dimension of the transposed layout, which is what a 49k-token
    vocabulary costs)."""
    vocab = logits.shape[-1]
    return -F.cross_entropy(logits.float().reshape(-1, vocab), labels.reshape(-1), reduction="none").view(labels.shape)


def head_logprobs(model: Any, hidden: torch.Tensor, labels: torch.Tensor, chunk: int) -> torch.Tensor:
    """``target_logprobs`` of the output layer's logits of ``hidden`` (``kv_cache.hidden``), ``chunk``
    positions at a time. With gradients, each chunk's logits are computed again in the backward
    instead of kept (``torch.utils.checkpoint``): memory holds one chunk's logits however many
    positions the pass has, so the rest of the model runs on many rows at once, for the price of
    the output layer's forward twice."""
    head = model.get_output_embeddings()
    flat, flat_labels = hidden.reshape(-1, hidden.shape[-1]), labels.reshape(-1)
    parts = []
    for start in range(0, flat.shape[0], chunk):
        args = (head, flat[start : start + chunk], flat_labels[start : start + chunk])
        if torch.is_grad_enabled():
            parts.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False, preserve_rng_state=False))
        else:
            parts.append(_chunk_logprobs(*args))
    return torch.cat(parts).view(labels.shape)


def _chunk_logprobs(head: Any, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return target_logprobs(head(hidden), labels)


@dataclass(frozen=True)
class Cluster:
    """Rows (indices into the batch) whose first ``shared`` positions are the same, inputs and targets."""

    rows: tuple[int, ...]
    shared: int


def _common(a: Sequence[int], b: Sequence[int], ta: torch.Tensor, tb: torch.Tensor) -> int:
    """Leading positions where two rows agree in inputs and targets, leaving each a position of its own."""
    length = shared_prefix_length([a, b])
    while length and not torch.equal(ta[:length], tb[:length]):
        length -= 1  # the targets of a shared input may still differ (e.g. the first action token)
    return length


def micro_batches(lengths: Sequence[int], budget: int, by_length: bool = False) -> Iterator[list[int]]:
    """Index groups whose padded length times size stays within ``budget`` positions (a group of one
    may exceed it): consecutive indices, or with ``by_length`` the indices from shortest to longest,
    so that rows of like length share a pass (a ``preset=smollm2-tool`` step's suffixes run 6 to 142
    positions: in order 45% of the suffix positions computed were padding, by length 26%)."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i]) if by_length else range(len(lengths))
    group: list[int] = []
    longest = 0
    for index in order:
        length = lengths[index]
        if group and max(longest, length) * (len(group) + 1) > budget:
            yield group
            group, longest = [], 0
        group.append(index)
        longest = max(longest, length)
    if group:
        yield group


def _cost(clusters: list[Cluster], lengths: Sequence[int], budget: int) -> int:
    """Positions computed, padding included, in the passes ``scoring.scored_batches`` runs with
    ``budget`` positions a pass: the prefix passes, their rows' suffixes by length, the plain rows by length."""
    shared = [c for c in clusters if c.shared]
    cost = 0
    for part in micro_batches([c.shared for c in shared], budget // 2):
        prefix = len(part) * max(shared[k].shared for k in part)
        own = [lengths[r] - shared[k].shared for k in part for r in shared[k].rows]
        cost += prefix + _padded(own, budget - prefix)
    return cost + _padded([lengths[r] for c in clusters if not c.shared for r in c.rows], budget)


def _padded(lengths: Sequence[int], budget: int) -> int:
    return sum(len(g) * max(lengths[i] for i in g) for g in micro_batches(lengths, budget, by_length=True))


def sharing_plan(inputs: Sequence[Sequence[int]], targets: Sequence[torch.Tensor], budget: int) -> list[Cluster]:
    """Clusters of rows that share a prefix of at least ``MIN_SHARED_TOKENS`` in inputs and targets
    (rows sharing none are clusters of one with ``shared=0``): the split that computes the fewest
    positions in passes of ``budget`` positions (one long row pads only its own pass)."""
    if len(inputs) < 2 or any(t.ndim != 1 for t in targets):
        return [Cluster(tuple(range(len(inputs))), 0)]
    order = sorted(range(len(inputs)), key=lambda i: list(inputs[i]))
    common = [_common(inputs[a], inputs[b], targets[a], targets[b]) for a, b in zip(order, order[1:], strict=False)]
    lengths = [len(seq) for seq in inputs]
    best = [Cluster(tuple(range(len(inputs))), 0)]
    best_cost = _cost(best, lengths, budget)
    for threshold in sorted(set(common) - set(range(MIN_SHARED_TOKENS))):
        clusters, run, run_shared = [], [order[0]], None
        for row, length in zip(order[1:], common, strict=True):
            if length >= threshold:
                run.append(row)
                run_shared = length if run_shared is None else min(run_shared, length)
            else:
                clusters.append(Cluster(tuple(run), run_shared or 0))
                run, run_shared = [row], None
        clusters.append(Cluster(tuple(run), run_shared or 0))
        cost = _cost(clusters, lengths, budget)
        if cost < best_cost:
            best, best_cost = clusters, cost
    return best


class SharedPrefixes:
    """The prefix pass of some clusters, whose rows' suffixes then run in micro-batches of any size.

    With gradients on, the prefix's logprobs and its KV cache are handed to the suffixes as
    detached leaves, so each micro-batch's backward stops at them and adds up their gradients;
    ``backward()`` then sends the sum through the prefix pass once. The prefix runs once however
    many micro-batches its rows need, and the gradient is that of the plain pass."""

    def __init__(
        self,
        model: Any,
        inputs: Sequence[Sequence[int]],
        targets: Sequence[torch.Tensor],
        pad_id: int,
        clusters: Sequence[Cluster],
        chunk: int,
    ) -> None:
        self.model, self.inputs, self.targets, self.pad_id, self.chunk = model, inputs, targets, pad_id, chunk
        self.clusters = list(clusters)
        device = model.device
        width = max(c.shared for c in self.clusters)
        self.positions = len(self.clusters) * width  # of the prefix batch, padding included
        prefix = torch.full((len(self.clusters), width), pad_id, dtype=torch.long)
        labels = torch.zeros((len(self.clusters), width), dtype=torch.long)
        self.mask = torch.zeros((len(self.clusters), width), dtype=torch.long)
        for k, cluster in enumerate(self.clusters):
            first = cluster.rows[0]
            prefix[k, : cluster.shared] = torch.as_tensor(list(inputs[first][: cluster.shared]), dtype=torch.long)
            labels[k, : cluster.shared] = targets[first][: cluster.shared]
            self.mask[k, : cluster.shared] = 1
        # right padding: under the causal mask it never changes the tokens before it
        hidden, cache = kv_cache.hidden(model, input_ids=prefix.to(device), attention_mask=self.mask.to(device))
        logprobs = head_logprobs(model, hidden, labels.to(device), chunk)
        self._graph = [logprobs, *(t for pair in kv_cache.tensors(cache) for t in pair)]
        grad = torch.is_grad_enabled()
        self._leaves = [t.detach().requires_grad_() for t in self._graph] if grad else self._graph
        self.rows = [(k, row) for k, cluster in enumerate(self.clusters) for row in cluster.rows]
        self.own = [len(inputs[row]) - self.clusters[k].shared for k, row in self.rows]

    def logprobs(self, part: Sequence[int]) -> list[torch.Tensor]:
        """Logprobs of the rows ``self.rows[j]`` for ``j`` in ``part``: the prefix's, then the suffix's own."""
        device = self.model.device
        rows = [self.rows[j] for j in part]
        index = torch.as_tensor([k for k, _ in rows], device=device)
        prefix_logprobs, *flat = self._leaves
        cache = kv_cache.from_tensors(
            self.model, [(k[index], v[index]) for k, v in zip(flat[::2], flat[1::2], strict=True)]
        )
        own = [self.own[j] for j in part]
        width = max(own)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        labels = torch.zeros((len(rows), width), dtype=torch.long)
        positions = torch.zeros((len(rows), width), dtype=torch.long)
        for j, (k, row) in enumerate(rows):
            shared = self.clusters[k].shared
            ids[j, : own[j]] = torch.as_tensor(list(self.inputs[row][shared:]), dtype=torch.long)
            labels[j, : own[j]] = self.targets[row][shared:]
            positions[j] = torch.arange(shared, shared + width)
        # the cluster's padding is masked; the suffix's own right padding is harmless (causal)
        mask = torch.cat([self.mask[[k for k, _ in rows]], torch.ones((len(rows), width), dtype=torch.long)], dim=1)
        hidden = kv_cache.hidden(
            self.model,
            cache,
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            position_ids=positions.to(device),
        )[0]
        logprobs = head_logprobs(self.model, hidden, labels.to(device), self.chunk)
        return [
            torch.cat([prefix_logprobs[k, : self.clusters[k].shared], logprobs[j, : own[j]]])
            for j, (k, _) in enumerate(rows)
        ]

    def backward(self) -> None:
        """Send the gradients gathered at the leaves through the prefix pass (once every micro-batch
        of its rows has run its backward)."""
        pairs = [
            (t, leaf.grad)
            for t, leaf in zip(self._graph, self._leaves, strict=True)
            if leaf is not t and leaf.grad is not None
        ]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        self._graph = self._leaves = []
