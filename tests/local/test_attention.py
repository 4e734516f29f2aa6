"""The large models' attention: plain where a pass's scores are small, the fused kernel elsewhere,
the same numbers and gradients either way."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from tinker_emulator import TINY, attention
from tinker_emulator.models import load_model
from tinker_emulator.scoring import micro_batches

HEADS, KV_HEADS, DIM = 6, 2, 8
MODULE = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True)


def _inputs(batch=3, queries=5, keys=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, queries, DIM, generator=g, requires_grad=True)
    k = torch.randn(batch, KV_HEADS, keys, DIM, generator=g, requires_grad=True)
    v = torch.randn(batch, KV_HEADS, keys, DIM, generator=g, requires_grad=True)
    # causal after a cache of keys - queries positions; row 1 has two positions of left padding
    mask = torch.ones(batch, 1, queries, keys, dtype=torch.bool).tril(keys - queries)
    mask[1, :, :, :2] = False
    return q, k, v, mask


def test_plain_attention_equals_the_fused_kernel_in_values_and_gradients():
    results = []
    for fn in (attention.attention, sdpa_attention_forward):
        q, k, v, mask = _inputs()
        out, _ = fn(MODULE, q, k, v, mask, scaling=DIM**-0.5)
        (out * torch.arange(out.numel()).view_as(out).sin()).sum().backward()
        results.append((out.detach(), q.grad, k.grad, v.grad))
    for plain, fused in zip(*results, strict=True):
        torch.testing.assert_close(plain, fused, rtol=1e-5, atol=1e-5)


def test_a_query_that_may_attend_nowhere_gets_numbers_not_nan():
    q, k, v, mask = _inputs()
    mask[2, :, 0, :] = False  # a left-padded position with nothing before it
    out, _ = attention.attention(MODULE, q, k, v, mask, scaling=DIM**-0.5)
    assert torch.isfinite(out).all()


def test_a_decoding_step_equals_the_fused_kernel():
    """One query per row, with and without a mask: the fused kernel's own path for it (query heads
    packed per key/value head) against the plain one."""
    for masked in (True, False):
        q, k, v, mask = _inputs()
        q, mask = q[:, :, -1:].detach(), mask[:, :, -1:] if masked else None
        plain, _ = attention.attention(MODULE, q, k, v, mask, scaling=DIM**-0.5)
        fused, _ = sdpa_attention_forward(MODULE, q, k, v, mask, scaling=DIM**-0.5)
        torch.testing.assert_close(plain, fused, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["large scores", "no mask", "an additive mask"])
def test_what_the_plain_way_does_not_take_goes_to_the_fused_kernel(monkeypatch, case):
    calls = []
    monkeypatch.setattr(attention, "sdpa_attention_forward", lambda *a, **k: calls.append(1) or (None, None))
    q, k, v, mask = _inputs()
    if case == "large scores":
        monkeypatch.setattr(attention, "PLAIN_MAX_SCORES", q.shape[0] * HEADS * q.shape[2] * k.shape[2] - 1)
    elif case == "no mask":
        mask = None
    else:
        mask = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    attention.attention(MODULE, q, k, v, mask, scaling=DIM**-0.5)
    assert calls == [1]


def test_the_tiny_models_keep_the_kernel_their_runs_were_recorded_with():
    assert load_model(TINY, torch.device("cpu")).model.config._attn_implementation == "sdpa"


def test_micro_batches_by_length_pad_less_and_keep_every_row():
    lengths, budget = [5, 100, 6, 98], 200

    def padded(groups):
        return sum(len(g) * max(lengths[i] for i in g) for g in groups)

    in_order = list(micro_batches(lengths, budget))
    by_length = list(micro_batches(lengths, budget, by_length=True))
    assert sorted(i for g in by_length for i in g) == [0, 1, 2, 3]
    assert all(len(g) * max(lengths[i] for i in g) <= budget for g in by_length)
    assert (padded(in_order), padded(by_length)) == (396, 212)
