"""The shared-prefix prompt pass gives each row the tokens and logprobs it gets alone."""

from __future__ import annotations

import torch

from gemlab.local import generation
from gemlab.local.generation import Row, generate
from gemlab.local.models import TINY, load_model
from gemlab.local.prefill import MIN_SHARED_TOKENS, shared_prefix_length


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
    from gemlab.tiny.model import build_tiny_model

    pad = load_model(TINY, torch.device("cpu")).pad_token_id
    model = build_tiny_model(seed=0, pretrained=True)  # not the process's cached copy, which other tests train adapters on
    monkeypatch.setattr(generation, "worth_sharing", lambda model: True)
    prefix = list(range(10, 10 + MIN_SHARED_TOKENS + 4))
    prompts = [prefix + [3], prefix + [4, 5, 6], prefix + [7, 8], prefix + [9] * 5]
    batched = generate(model, _rows(prompts), pad, str)
    alone = [generate(model, _rows([p], seed=i), pad, str)[0] for i, p in enumerate(prompts)]
    for b, a in zip(batched, alone):
        assert b.tokens == a.tokens
        assert max(abs(x - y) for x, y in zip(b.logprobs, a.logprobs)) < 1e-4


def test_training_with_a_shared_prefix_gives_the_plain_loss_and_gradient(monkeypatch):
    """Logprobs and LoRA-free gradients of the shared-prefix pass equal the plain pass (1e-5)."""
    from gemlab.local import scoring
    from gemlab.tiny.model import build_tiny_model

    model = build_tiny_model(seed=0, pretrained=True)
    prefix = list(range(10, 10 + MIN_SHARED_TOKENS + 4))
    inputs = [prefix + [3], prefix + [4, 5, 6], prefix + [7, 8]]
    targets = [torch.as_tensor(seq[1:] + [11]) for seq in inputs]

    def run(share):
        monkeypatch.setattr(scoring, "worth_sharing", lambda m: share)
        model.zero_grad()
        lps = scoring.target_logprobs(model, inputs, targets, 0)
        sum((lp * (i + 1)).sum() for i, lp in enumerate(lps)).backward()
        return [lp.detach() for lp in lps], [p.grad.clone() for p in model.parameters() if p.grad is not None]

    (shared_lp, shared_grad), (plain_lp, plain_grad) = run(True), run(False)
    for a, b in zip(shared_lp, plain_lp):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
    assert len(shared_grad) == len(plain_grad) > 0
    for a, b in zip(shared_grad, plain_grad):
        assert (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-7, float((a - b).abs().max() / b.abs().max())
