"""An episode's KV cache kept across its turns: a prompt that extends an earlier prompt and its
sampled tokens prefills only its new tokens and samples what it samples without the cache."""

from __future__ import annotations

import asyncio
import gc

import pytest
import torch
from tinker import types

from tests.helpers.local import nudge
from tinker_emulator import TINY, generation, kv_cache
from tinker_emulator.futures import SAMPLING, get_worker
from tinker_emulator.generation import Row, generate
from tinker_emulator.models import load_model
from tinker_emulator.prefill import MIN_SHARED_TOKENS
from tinker_emulator.turn_cache import BUDGET_ENV, Memory, TurnCache, budget_bytes

# what an environment adds after an action: the end of the turn, a reply, the next header
REPLY = "<|im_end|>\n<|im_start|>user\nToo low.<|im_end|>\n<|im_start|>assistant\n"


def _conversations(sampler, first_prompts, reply, turns=3):
    """Each prompt played for ``turns`` turns as one conversation (all episodes' requests of a turn
    together, as ``collect_batch`` sends them); returns every turn's responses."""

    async def play():
        prompts, played = [list(p) for p in first_prompts], []
        for turn in range(turns):
            responses = await asyncio.gather(
                *[
                    sampler.sample(
                        types.ModelInput.from_ints(p),
                        1,
                        types.SamplingParams(max_tokens=5, stop=[], seed=10 * turn + i),
                    )
                    for i, p in enumerate(prompts)
                ]
            )
            played.append(responses)
            prompts = [
                p + list(r.sequences[0].tokens) + reply[i % 3 :]
                for i, (p, r) in enumerate(zip(prompts, responses, strict=True))
            ]
        return played

    return asyncio.run(play())


def _widths(monkeypatch):
    """The width of every model pass of more than one position (prompt passes), as the model sees them."""
    widths, forward = [], kv_cache.forward

    def counting(model, cache=None, **inputs):
        if inputs["input_ids"].shape[1] > 1:
            widths.append(inputs["input_ids"].shape[1])
        return forward(model, cache, **inputs)

    monkeypatch.setattr(kv_cache, "forward", counting)
    return widths


def test_a_conversation_prefills_only_new_tokens_and_samples_as_without_the_cache(training, prompt, monkeypatch):
    """Same seeds, with and without the kept turns: the same tokens, logprobs within 1e-5 (the kept
    keys and values were computed in passes of other shapes, which round differently); with
    them, turns 2 and 3 run only the last sampled token and the reply."""
    nudge(training, prompt)
    sampler = training.save_weights_and_get_sampling_client().result()
    turns = load_model(TINY, torch.device("cpu"), role=SAMPLING).turns
    reply = training.get_tokenizer().encode(REPLY)
    firsts = [prompt, prompt[:-3] + prompt[-2:], prompt + prompt[-4:]]
    widths = _widths(monkeypatch)
    hits = turns.hits
    cached = _conversations(sampler, firsts, reply)
    assert turns.hits - hits == 2 * len(firsts)
    assert widths == [max(map(len, firsts)), 1 + len(reply), 1 + len(reply)]
    monkeypatch.setenv(BUDGET_ENV, "0")
    plain = _conversations(sampler, firsts, reply)
    assert turns.hits - hits == 2 * len(firsts)  # nothing kept, nothing found
    for turn_cached, turn_plain in zip(cached, plain, strict=True):
        for a, b in zip(turn_cached, turn_plain, strict=True):
            assert a.sequences[0].tokens == b.sequences[0].tokens
            torch.testing.assert_close(a.sequences[0].logprobs, b.sequences[0].logprobs, rtol=0, atol=1e-5)
    adapter = sampler._adapter
    assert any(key[0] == adapter for key in turns._entries)
    del sampler, cached, plain
    gc.collect()
    get_worker(SAMPLING).submit(lambda: None).result()  # the adapter's release has run
    assert not any(key[0] == adapter for key in turns._entries)


def test_kept_turns_are_not_used_once_the_weights_change(training, prompt):
    """An inflight sampler follows the run's weights: after an optimizer step its earlier turns are stale."""
    nudge(training, prompt)
    sampler = training.save_weights_and_get_sampling_client(kind="inflight").result()
    turns, reply = training._model.turns, training.get_tokenizer().encode(REPLY)
    first = sampler.sample(
        types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=4, stop=[], seed=0)
    ).result()
    second = prompt + list(first.sequences[0].tokens) + reply
    hits = turns.hits
    nudge(training, prompt)
    response = sampler.sample(
        types.ModelInput.from_ints(second), 1, types.SamplingParams(max_tokens=4, stop=[], seed=1)
    ).result()
    assert turns.hits == hits
    third = second + list(response.sequences[0].tokens) + reply
    sampler.sample(types.ModelInput.from_ints(third), 1, types.SamplingParams(max_tokens=4, stop=[], seed=2)).result()
    assert turns.hits == hits + 1  # the same weights: kept


def _rows(prompts, seed):
    return [
        Row(prompt=p, max_tokens=5, temperature=1.0, top_k=0, top_p=1.0, stop_ids=frozenset(), stop_strings=(),
            generator=torch.Generator().manual_seed(seed + i))
        for i, p in enumerate(prompts)
    ]


def test_kept_turns_mix_with_a_shared_prefix_and_repeated_prompts(monkeypatch):
    """In one batch: rows that continue a kept turn, fresh rows sharing a prefix (run once), and a
    repeated prompt (run once): every row samples as it does without the cache."""
    from gemlab.tiny.model import build_tiny_model

    pad = load_model(TINY, torch.device("cpu")).pad_token_id
    model = build_tiny_model(seed=0, pretrained=True)
    monkeypatch.setattr(generation, "worth_sharing", lambda model: True)
    prefix = list(range(10, 10 + MIN_SHARED_TOKENS + 4))
    firsts = [prefix + [3], prefix + [4, 5, 6]]
    memory = Memory(TurnCache(), None, ())
    turn_one = generate(model, _rows(firsts, 0), pad, str, memory)
    continued = [p + r.tokens + [7, 8, 9][: i + 1] for i, (p, r) in enumerate(zip(firsts, turn_one, strict=True))]
    prompts = continued + [prefix + [20, 21], prefix + [22], prefix + [22]]
    with_memory = generate(model, _rows(prompts, 100), pad, str, memory)
    assert memory.cache.hits == 2
    without = generate(model, _rows(prompts, 100), pad, str)
    for a, b in zip(with_memory, without, strict=True):
        assert a.tokens == b.tokens
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5


def _pairs(tokens: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One layer's keys and values for ``tokens`` positions: 2 x 8 floats a position (64 bytes)."""
    return [(torch.zeros(1, tokens, 8), torch.zeros(1, tokens, 8))]


def test_the_cache_keeps_its_budget_least_recently_used_first(monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, str(1000 / (1 << 20)))  # 1000 bytes: fifteen positions
    cache = TurnCache()
    for start in (10, 20, 30):
        cache.keep("a", (), list(range(start, start + 4)), _pairs(4))  # 256 bytes each
    assert cache.find("a", (), [10, 11, 12, 13, 99])[0] == 4  # used: now the most recent
    cache.keep("a", (), list(range(40, 44)), _pairs(4))  # 1024 bytes: the least recently used goes
    assert cache.bytes == 768
    assert cache.find("a", (), [20, 21, 22, 23, 99]) is None
    assert cache.find("a", (), [10, 11, 12, 13, 99]) is not None
    assert cache.find("a", (), [10, 11, 12, 13]) is None  # a prompt needs a token of its own
    assert cache.find("b", (), [10, 11, 12, 13, 99]) is None  # another adapter's
    cache.keep("a", (), [10, 11, 12, 13, 99, 5], _pairs(6))  # extends [10..13]: that one goes
    assert cache.find("a", (), [10, 11, 12, 13, 7]) is None and cache.bytes == 2 * 256 + 384
    assert cache.find("a", ("changed",), [40, 41, 42, 43, 1]) is None and cache.bytes == 0  # other weights: all stale
    cache.keep("a", (), [1] * 20, _pairs(20))  # over the whole budget: not kept
    assert cache.bytes == 0


def test_a_bad_budget_says_what_is_allowed(monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match="megabytes, a number >= 0"):
        budget_bytes()
