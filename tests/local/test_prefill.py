"""The shared-prefix prompt pass gives each row the tokens and logprobs it gets alone."""

from __future__ import annotations

import torch

from tinker_emulator import TINY, generation
from tinker_emulator.generation import Row, generate
from tinker_emulator.models import load_model
from tinker_emulator.prefill import MIN_SHARED_TOKENS, shared_prefix_length


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
    # not the process's cached copy, which other tests train adapters on
    model = build_tiny_model(seed=0, pretrained=True)
    monkeypatch.setattr(generation, "worth_sharing", lambda model: True)
    prefix = list(range(10, 10 + MIN_SHARED_TOKENS + 4))
    prompts = [prefix + [3], prefix + [4, 5, 6], prefix + [7, 8], prefix + [9] * 5]
    batched = generate(model, _rows(prompts), pad, str)
    alone = [generate(model, _rows([p], seed=i), pad, str)[0] for i, p in enumerate(prompts)]
    for b, a in zip(batched, alone, strict=True):
        assert b.tokens == a.tokens
        assert max(abs(x - y) for x, y in zip(b.logprobs, a.logprobs, strict=True)) < 1e-4


def assert_shared_equals_plain(monkeypatch, model, inputs, targets, vocab_size=1 << 10):
    """Logprobs (1e-5) and gradients (1e-4 of the largest) of ``scored_batches`` with prefix sharing
    on equal those of the plain pass; each micro-batch's backward runs before the next, as training does."""
    from tinker_emulator import scoring

    def run(share):
        monkeypatch.setattr(scoring, "worth_sharing", lambda m: share)
        model.zero_grad()
        lps = {}
        for rows, logprobs in scoring.scored_batches(model, inputs, targets, 0, vocab_size):
            sum((lp * (i + 1)).sum() for i, lp in zip(rows, logprobs, strict=True)).backward()
            lps.update((i, lp.detach()) for i, lp in zip(rows, logprobs, strict=True))
        assert sorted(lps) == list(range(len(inputs)))
        return [lps[i] for i in range(len(inputs))], [p.grad.clone() for p in model.parameters() if p.grad is not None]

    (shared_lp, shared_grad), (plain_lp, plain_grad) = run(True), run(False)
    for a, b in zip(shared_lp, plain_lp, strict=True):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5)
    assert len(shared_grad) == len(plain_grad) > 0
    for a, b in zip(shared_grad, plain_grad, strict=True):
        assert (a - b).abs().max() <= 1e-4 * b.abs().max() + 1e-7, float((a - b).abs().max() / b.abs().max())


def test_training_with_a_shared_prefix_gives_the_plain_loss_and_gradient(monkeypatch):
    """Logprobs and LoRA-free gradients of the shared-prefix pass equal the plain pass (1e-5)."""
    from gemlab.tiny.model import build_tiny_model

    model = build_tiny_model(seed=0, pretrained=True)
    prefix = list(range(10, 10 + MIN_SHARED_TOKENS + 4))
    inputs = [prefix + [3], prefix + [4, 5, 6], prefix + [7, 8]]
    targets = [torch.as_tensor(seq[1:] + [11]) for seq in inputs]

    assert_shared_equals_plain(monkeypatch, model, inputs, targets)


def test_rows_with_the_same_prompt_run_it_once_and_sample_as_they_would_alone(monkeypatch):
    """A GRPO group's rows show one problem: the prompt pass runs each distinct prompt once
    (counted at the model), and every row still gets the tokens and logprobs it gets alone."""
    from gemlab.tiny.model import build_tiny_model
    from tinker_emulator import kv_cache

    pad = load_model(TINY, torch.device("cpu")).pad_token_id
    model = build_tiny_model(seed=0, pretrained=True)
    monkeypatch.setattr(generation, "worth_sharing", lambda model: True)
    prefix = list(range(10, 10 + MIN_SHARED_TOKENS + 4))
    problems = [prefix + [3, 4], prefix + [5], prefix + [6, 7, 8]]
    prompts = [problems[i % 3] for i in range(9)]  # three groups of three, interleaved
    rows_in_passes = []
    forward = kv_cache.forward

    def counting(model, cache=None, **inputs):
        rows_in_passes.append(inputs["input_ids"].shape[0])
        return forward(model, cache, **inputs)

    monkeypatch.setattr(kv_cache, "forward", counting)
    batched = generate(model, _rows(prompts), pad, str)
    assert rows_in_passes[:2] == [1, 3]  # the shared prefix once, then the three problems' own tokens
    alone = [generate(model, _rows([p], seed=i), pad, str)[0] for i, p in enumerate(prompts)]
    for b, a in zip(batched, alone, strict=True):
        assert b.tokens == a.tokens
        assert max(abs(x - y) for x, y in zip(b.logprobs, a.logprobs, strict=True)) < 1e-4


def test_the_sharing_plan_runs_each_groups_problem_once_and_leaves_a_lone_row_plain():
    from tinker_emulator.prefix_scoring import Cluster, sharing_plan

    preamble = list(range(100, 120))
    problems = [preamble + list(range(200 + 10 * g, 210 + 10 * g)) for g in range(3)]  # 30 tokens each
    inputs = [problems[g] + [g, j, 1 + j % 2] for g in range(3) for j in range(4)] + [[7] * 40]
    targets = [torch.as_tensor(seq[1:] + [0]) for seq in inputs]
    plan = sharing_plan(inputs, targets, 1024)
    assert sorted((sorted(c.rows), c.shared) for c in plan) == [
        ([0, 1, 2, 3], 30), ([4, 5, 6, 7], 30), ([8, 9, 10, 11], 30), ([12], 0)
    ]  # inputs agree on 31 tokens (the problem, then g), but the target at position 30 is the row's own
    assert sharing_plan(inputs[:1], targets[:1], 1024) == [Cluster((0,), 0)]
    # targets that differ right after the inputs' common part shorten what is shared
    targets[1] = targets[1].clone()
    targets[1][25] = 99
    assert {c.shared for c in sharing_plan(inputs[:4], targets[:4], 1024)} == {25}


def test_one_long_row_does_not_stop_its_batch_sharing_prefixes():
    """A tool's long reply makes one row of a step many times the others' length: the plan still
    runs each group's problem once, since by-length micro-batches pad only that row's own pass (a
    cost that padded every suffix to the longest left 40 of a step's 101 rows plain: 2x its time)."""
    from tinker_emulator.prefix_scoring import sharing_plan

    preamble = list(range(100, 120))
    problems = [preamble + list(range(200 + 10 * g, 210 + 10 * g)) for g in range(4)]  # 30 tokens each
    inputs = [problems[g] + [g, j, 1 + j % 3] for g in range(4) for j in range(8)]
    inputs[4], inputs[5] = problems[0] + [0, 77, 1], problems[0] + [0, 77, 2] + [9] * 300  # a long tool reply
    targets = [torch.as_tensor(seq[1:] + [0]) for seq in inputs]
    plan = sharing_plan(inputs, targets, 64)  # not rows 4 and 5 sharing 31 tokens, the others plain
    assert sorted((sorted(c.rows), c.shared) for c in plan) == [
        (list(range(8 * g, 8 * g + 8)), 30) for g in range(4)
    ]


def test_training_with_group_prefixes_gives_the_plain_loss_and_gradient(monkeypatch):
    """Groups with prefixes of different lengths (the prefix batch is padded) and a row that
    shares nothing: logprobs and gradients equal the plain pass."""
    from gemlab.tiny.model import build_tiny_model
    from tinker_emulator import scoring

    model = build_tiny_model(seed=0, pretrained=True)
    base = list(range(10, 10 + MIN_SHARED_TOKENS))
    groups = [base + [40, 41, 42, 43, 44, 45], base + [50, 51]]
    inputs = [groups[0] + [3], groups[0] + [4, 5, 6], groups[1] + [7, 8], groups[1] + [9], [60, 61, 62]]
    targets = [torch.as_tensor(seq[1:] + [11]) for seq in inputs]
    monkeypatch.setattr(scoring, "worth_sharing", lambda m: True)
    plan = scoring.sharing_plan(inputs, targets, 1024)
    assert sorted(c.shared for c in plan) == [0, 17, 21]  # two groups and the lone row

    assert_shared_equals_plain(monkeypatch, model, inputs, targets)


def test_a_prefix_runs_once_however_many_micro_batches_its_rows_take(monkeypatch):
    """A budget of 8 positions per micro-batch and logits 3 positions at a time: each group's prefix
    (18 and 19 tokens) runs once, in a pass of its own, its rows' suffixes in micro-batches of at
    most 8 positions, and the logprobs and the gradients gathered over those micro-batches and
    chunks still equal the plain pass's."""
    from gemlab.tiny.model import build_tiny_model
    from tinker_emulator import kv_cache, scoring

    model = build_tiny_model(seed=0, pretrained=True)
    base = list(range(10, 10 + MIN_SHARED_TOKENS))
    groups = [base + [40, 41, 42], base + [50, 51, 52, 53]]
    inputs = [
        groups[0] + [3, 4, 5],
        groups[0] + [6, 7, 8, 9],
        groups[0] + [1, 2],
        groups[1] + [7, 8, 9],
        groups[1] + [5, 6, 4, 3],
    ]
    targets = [torch.as_tensor(seq[1:] + [11]) for seq in inputs]
    passes = []
    hidden = kv_cache.hidden

    def counting(model, cache=None, **inputs):
        passes.append((cache is not None, tuple(inputs["input_ids"].shape)))
        return hidden(model, cache, **inputs)

    monkeypatch.setattr(kv_cache, "hidden", counting)
    monkeypatch.setattr(scoring, "MAX_PASS_POSITIONS", 8)
    vocab = scoring.HEAD_BLOCK_FLOATS // 3  # logits of 3 positions at a time
    assert_shared_equals_plain(monkeypatch, model, inputs, targets, vocab_size=vocab)
    prefix_passes = [shape for continued, shape in passes if not continued]
    suffix_passes = [shape for continued, shape in passes if continued]
    assert sorted(prefix_passes) == [(1, 18), (1, 19)]  # each group's prefix once (the backward sends it its gradient)
    assert sum(rows for rows, _ in suffix_passes) == 5 and all(rows * width <= 8 for rows, width in suffix_passes)
    assert len(suffix_passes) >= 4  # the rows of a prefix spread over several micro-batches


def test_generation_batches_cut_only_where_padding_costs_more_than_a_call():
    """A tool step's turn: 63 prompts of 190-330 tokens and one of 900 (a tool's long reply): the
    long one goes alone instead of padding 63 rows to 900; prompts of like length stay one batch;
    no batch exceeds its rows, every prompt comes once."""
    from tinker_emulator.generation import generation_batches

    lengths = [190 + (7 * i) % 140 for i in range(63)] + [900]
    batches = generation_batches(lengths, max_rows=64)
    assert [len(b) for b in batches] == [63, 1] and batches[1] == [63]
    assert generation_batches(lengths[:63], max_rows=64) == [sorted(range(63), key=lambda i: lengths[i])]
    batches = generation_batches([50] * 100, max_rows=64)
    assert sorted(i for b in batches for i in b) == list(range(100)) and max(len(b) for b in batches) <= 64
