"""An episode's KV cache kept across its turns: the keys and values of sequences a sampler
generated, so that a later prompt that extends one of them prefills only its new tokens.

In a conversation, turn t+1's prompt is turn t's prompt, then its sampled action, then what the
environment added (tinker-cookbook's renderers build prompts this way). When a row of a
generation batch ends, its keys and values (prompt and action, all but the last action token,
which was never fed to the model) are kept here under those tokens; a later prompt that begins
with a kept sequence starts from its keys and values and runs only the rest. A prompt that
extends nothing kept (a template that renders each turn afresh) runs whole, as before.

Entries belong to one model copy (only its worker touches them) and to the weights that computed
them: the adapter, stamped with its tensors' versions (torch bumps a tensor's version at every
in-place write: an optimizer step, loaded weights), so entries of weights that have since
changed are dropped, never used. An adapter's entries go with the adapter. A kept sequence that a
newer one extends is dropped (the newer serves every prompt it served), and the least recently
used go first once the entries hold more than ``$GEMLAB_KV_CACHE_MB`` megabytes (default 512;
0 keeps nothing). SmolLM2-135M holds 30 layers x (keys, values) x 3 KV heads x 64 dims = 11,520
numbers a token: 23 kB in bfloat16, 46 kB in float32, so 512 MB hold 23,000 tokens in bfloat16
(64 episodes of 360 tokens; 11,000 in float32). A base model's entries (no adapter) never go
stale: they stay until newer ones push them out.
"""

from __future__ import annotations

import os
from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch

BUDGET_ENV = "GEMLAB_KV_CACHE_MB"
DEFAULT_MB = 512

Pairs = list[tuple[torch.Tensor, torch.Tensor]]


def budget_bytes() -> int:
    """``$GEMLAB_KV_CACHE_MB`` in bytes (read at each call, so a notebook can change it)."""
    text = os.environ.get(BUDGET_ENV) or str(DEFAULT_MB)
    try:
        megabytes = float(text)
    except ValueError:
        megabytes = -1.0
    if not megabytes >= 0:
        raise ValueError(f"${BUDGET_ENV}={text!r} is not allowed; give megabytes, a number >= 0 (0 keeps nothing)")
    return int(megabytes * (1 << 20))


def _size(pairs: Pairs) -> int:
    return sum(t.numel() * t.element_size() for pair in pairs for t in pair)


class TurnCache:
    """Kept sequences' keys and values, by adapter and tokens, least recently used first."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[Hashable, tuple[int, ...]], Pairs] = OrderedDict()
        self._lengths: dict[Hashable, Counter[int]] = {}  # per adapter, how many entries have each length
        self._stamps: dict[Hashable, Hashable] = {}  # per adapter, the weights its entries were computed with
        self.bytes = 0
        self.hits = 0  # prompts that started from a kept sequence (tests and benchmarks read it)

    def find(self, adapter: Hashable, stamp: Hashable, prompt: Sequence[int]) -> tuple[int, Pairs] | None:
        """The longest kept sequence of these weights that ``prompt`` begins with, leaving at least
        one token of its own (its last position's logits start the generation): its length and its
        keys and values; ``None`` when there is none."""
        self._check_stamp(adapter, stamp)
        for length in sorted(self._lengths.get(adapter, ()), reverse=True):
            key = (adapter, tuple(prompt[:length]))
            if length < len(prompt) and key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return length, self._entries[key]
        return None

    def keep(self, adapter: Hashable, stamp: Hashable, tokens: Sequence[int], pairs: Pairs) -> None:
        """Keep ``pairs``, the keys and values of ``tokens`` computed by these weights."""
        budget = budget_bytes()
        size = _size(pairs)
        if size > budget:
            return
        self._check_stamp(adapter, stamp)
        tokens = tuple(tokens)
        for length in list(self._lengths.get(adapter, ())):  # what this sequence extends is no longer needed
            if length <= len(tokens):
                self._drop((adapter, tokens[:length]))
        self._entries[(adapter, tokens)] = pairs
        self._lengths.setdefault(adapter, Counter())[len(tokens)] += 1
        self.bytes += size
        while self.bytes > budget:
            self._drop(next(iter(self._entries)))

    def forget(self, adapter: Hashable) -> None:
        """Drop every entry of ``adapter`` (it was deleted)."""
        for key in [key for key in self._entries if key[0] == adapter]:
            self._drop(key)
        self._stamps.pop(adapter, None)

    def _check_stamp(self, adapter: Hashable, stamp: Hashable) -> None:
        if self._stamps.get(adapter, stamp) != stamp:
            self.forget(adapter)
        self._stamps[adapter] = stamp

    def _drop(self, key: tuple[Hashable, tuple[int, ...]]) -> None:
        pairs = self._entries.pop(key, None)
        if pairs is None:
            return
        self.bytes -= _size(pairs)
        lengths = self._lengths[key[0]]
        lengths[len(key[1])] -= 1
        if not lengths[len(key[1])]:
            del lengths[len(key[1])]


@dataclass(frozen=True)
class Memory:
    """A ``TurnCache`` as one set of weights sees it: what ``generation.generate`` finds and keeps."""

    cache: TurnCache
    adapter: Hashable
    stamp: Hashable

    def find(self, prompt: Sequence[int]) -> tuple[int, Pairs] | None:
        return self.cache.find(self.adapter, self.stamp, prompt)

    def keep(self, tokens: Sequence[int], pairs: Pairs) -> None:
        self.cache.keep(self.adapter, self.stamp, tokens, pairs)
