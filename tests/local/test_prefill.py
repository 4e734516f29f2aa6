"""The shared-prefix prompt pass gives each row the tokens and logprobs it gets alone."""

from __future__ import annotations

import torch

from gemlab.local import sampling
from gemlab.local.models import TINY, load_model
from gemlab.local.prefill import MIN_SHARED_TOKENS, shared_prefix_length
from gemlab.local.sampling import Row, generate


def test_shared_prefix_leaves_each_row_a_token_of_its_own():
    assert shared_prefix_length([[1, 2, 3, 4], [1, 2, 3, 9]]) == 3
    assert shared_prefix_length([[1, 2, 3], [1, 2, 3, 4]]) == 2  # the shorter row keeps its last token
    assert shared_prefix_length([[5, 2], [1, 2]]) == 0


def _rows(prompts, seed=0):
    return [
        Row(prompt=p, max_tokens=6, temperature=1.0, top_k=0, top_p=1.0, stop_ids=frozenset(), stop_strings=(),
            generator=torch.Generator().manual_seed(seed + i))
        for i, p in enumerate(prompts)
    ]


def test_batched_with_shared_prefix_equals_each_row_alone(monkeypatch):
    """Fixed seeds: the same tokens, and logprobs within 1e-4 nats (other matmul shapes round differently)."""
    lm = load_model(TINY, torch.device("cpu"))
    monkeypatch.setattr(sampling, "worth_sharing", lambda model: True)
    prefix = list(range(10, 10 + MIN_SHARED_TOKENS + 4))
    prompts = [prefix + [3], prefix + [4, 5, 6], prefix + [7, 8], prefix + [9] * 5]
    batched = generate(lm.model, _rows(prompts), lm.pad_token_id, str)
    alone = [generate(lm.model, _rows([p], seed=i), lm.pad_token_id, str)[0] for i, p in enumerate(prompts)]
    for b, a in zip(batched, alone):
        assert b.tokens == a.tokens
        assert max(abs(x - y) for x, y in zip(b.logprobs, a.logprobs)) < 1e-4
