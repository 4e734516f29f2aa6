"""The prompt pass of a generation batch: every row's prompt into the KV cache, with the prefix
that all rows share computed once, and each distinct prompt once.

Every env of a step renders the same template preamble (and, in a game, the same opening
observation), so the rows of a batch often share tens to hundreds of leading tokens. Those run
once, as a batch of one; the cache is then repeated for every row, and only each row's own
suffix runs batched. Rows keep their own positions: a suffix is right-aligned after padding that
the attention mask hides, so row ``i``'s tokens sit at positions ``0 .. len(prompt_i) - 1`` as
they would alone. Rows with the same prompt (the samples of one request, or a GRPO group's envs,
which all show the same problem) run it once and share its cache. A row whose prompt begins with
a sequence generated earlier (an episode's previous turn, ``turn_cache.py``) starts from that
sequence's keys and values instead, right-aligned after padding like a shared prefix, and runs
only its new tokens. Results equal the plain left-padded pass up to float rounding (other matmul
shapes); ``share=False`` with nothing known is that plain pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from tinker_emulator import kv_cache, precision
from tinker_emulator.decoding import Decoder
from tinker_emulator.kv_cache import Pairs

# A shared prefix shorter than this is not worth a separate model call.
MIN_SHARED_TOKENS = 16


def worth_sharing(model: Any) -> bool:
    """Whether ``model`` is large enough for a shared prefix to save time (``precision.MIN_PARAMETERS``:
    below it one more model call costs more than the prefix saves; the tiny model's prompts are 36-60
    tokens, and its recorded runs keep repeating bit for bit)."""
    return sum(p.numel() for p in model.parameters()) >= precision.MIN_PARAMETERS


def shared_prefix_length(prompts: Sequence[Sequence[int]]) -> int:
    """Leading tokens common to every prompt, leaving at least one token of each row's own (its
    last position's logits start the generation)."""
    shortest = min(len(p) for p in prompts)
    first = prompts[0]
    length = 0
    while length < shortest - 1 and all(p[length] == first[length] for p in prompts):
        length += 1
    return length


def prefill(
    model: Any,
    prompts: Sequence[Sequence[int]],
    pad_id: int,
    share: bool = True,
    known: Sequence[tuple[int, Pairs] | None] | None = None,
    decoder: Decoder | None = None,
) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the prompts; returns the KV cache, the last position's logits per row (float32), the
    attention mask so far and each row's next position. ``known[i]``, when given, holds the
    length and the keys and values (per layer ``(heads, length, head_dim)``) of a prefix of
    ``prompts[i]`` computed before. A ``decoder`` (``decoding.py``) runs the passes in place of
    the Hugging Face model."""
    known = list(known) if known is not None else [None] * len(prompts)
    if share:
        distinct: dict[tuple[int, ...], int] = {}
        row_of = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        if len(distinct) < len(prompts):  # each distinct prompt once, then a cache row per prompt
            first = {row: i for i, row in reversed(list(enumerate(row_of)))}
            cache, logits, mask, next_position = prefill(
                model,
                [list(p) for p in distinct],
                pad_id,
                share,
                [known[first[row]] for row in range(len(distinct))],
                decoder,
            )
            index = torch.as_tensor(row_of, device=model.device)
            cache.reorder_cache(index)
            return cache, logits[index], mask[index], next_position[index]
    device = model.device
    fresh = [i for i, k in enumerate(known) if k is None]
    shared = shared_prefix_length([prompts[i] for i in fresh]) if share and len(fresh) > 1 else 0
    if shared < MIN_SHARED_TOKENS:
        shared = 0
    cache = kv_cache.for_sampling(model)
    if shared:
        prefix = torch.as_tensor([list(prompts[fresh[0]][:shared])], dtype=torch.long, device=device)
        cache, _ = _pass(model, decoder, cache, prefix)
    if len(fresh) < len(prompts):  # rows that start from what they know, the others from the shared prefix
        prefix_pairs = [(k[0], v[0]) for k, v in kv_cache.tensors(cache)] if shared else None
        starts = [shared if k is None else k[0] for k in known]
        cache, past_mask = kv_cache.left_padded(model, [prefix_pairs if k is None else k[1] for k in known])
    else:
        if shared:
            cache.batch_repeat_interleave(len(prompts))
        starts = [shared] * len(prompts)
        past_mask = torch.ones((len(prompts), shared), dtype=torch.long)
    suffixes = [list(p[start:]) for p, start in zip(prompts, starts, strict=True)]
    width = max(len(s) for s in suffixes)
    past = past_mask.shape[1]
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.cat([past_mask, torch.zeros((len(prompts), width), dtype=torch.long)], dim=1)
    positions = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, (suffix, start) in enumerate(zip(suffixes, starts, strict=True)):
        ids[i, width - len(suffix) :] = torch.as_tensor(suffix, dtype=torch.long)
        mask[i, past + width - len(suffix) :] = 1
        positions[i, width - len(suffix) :] = torch.arange(start, start + len(suffix))
    ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
    cache, logits = _pass(model, decoder, cache, ids, mask, positions)
    return cache, logits, mask, positions[:, -1] + 1


def _pass(
    model: Any,
    decoder: Decoder | None,
    cache: Any,
    ids: torch.Tensor,
    mask: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> tuple[Any, torch.Tensor]:
    """One pass of ``ids`` continuing ``cache``: the grown cache and each row's last logits (float32).
    Without ``mask`` and ``positions``, a first pass of unpadded rows."""
    if decoder is not None:
        if mask is None or positions is None:
            mask = torch.ones_like(ids)
            positions = torch.arange(ids.shape[1], device=ids.device).expand_as(ids)
        return cache, decoder.extend(cache, ids, mask, positions)
    given = {"attention_mask": mask, "position_ids": positions} if mask is not None else {}
    out, cache = kv_cache.forward(model, cache, input_ids=ids, logits_to_keep=1, **given)
    return cache, out.logits[:, -1].float()
