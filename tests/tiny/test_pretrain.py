"""The tiny preset's pretraining (gemlab/tiny/pretrain.py), its shipped weights and its tokenizer."""

from __future__ import annotations

import re

import pytest
import torch

from gemlab.tiny import pretrain, registry
from gemlab.tiny.model import (
    CHAT_FORMAT_TOKENS,
    TOKENIZER_FILE,
    build_tiny_model,
    load_tiny_tokenizer,
    tokenizer_corpus,
)

HINT = re.compile(r"you guessed (\d+), and the target number is (higher|lower) than")


@pytest.fixture(scope="module")
def tokenizer():
    return load_tiny_tokenizer()


def allowed_interval(prompt_text: str, low: int = 1, high: int = 10) -> tuple[int, int]:
    """The numbers still possible after the hints in a rendered prompt (an independent parse)."""
    for guess, direction in HINT.findall(prompt_text):
        if direction == "higher":
            low = max(low, int(guess) + 1)
        else:
            high = min(high, int(guess) - 1)
    return low, high


def test_teacher_probs_put_skill_on_the_middle_and_the_rest_evenly():
    state = pretrain.GameState(prompt=[], middle=7, guess=3, numbers=range(1, 11))
    probs = pretrain.teacher_probs(state, skill=0.25)
    assert sum(probs.values()) == pytest.approx(1.0)
    assert probs[7] == pytest.approx(0.25 + 0.075)
    assert all(probs[n] == pytest.approx(0.075) for n in range(1, 11) if n != 7)
    assert pretrain.teacher_probs(state, skill=1.0)[7] == pytest.approx(1.0)


def test_game_states_track_the_hints(tokenizer):
    states = pretrain.game_states("game:GuessTheNumber-v0-easy", skill=0.25, seed=3, tokenizer=tokenizer)
    for _ in range(200):
        state = next(states)
        low, high = allowed_interval(tokenizer.decode(state.prompt))
        assert state.middle == (low + high) // 2
        assert state.guess in state.numbers


def test_a_perfect_player_wins_every_easy_game(tokenizer):
    """With skill 1 the player bisects: no easy game (1..10, 4 turns) lasts beyond turn 4."""
    states = pretrain.game_states("game:GuessTheNumber-v0-easy", skill=1.0, seed=0, tokenizer=tokenizer)
    for _ in range(300):
        state = next(states)
        assert state.guess == state.middle
        assert tokenizer.decode(state.prompt).count("you guessed") <= 3


def test_pretraining_lowers_the_loss(tokenizer):
    model = build_tiny_model(seed=1, hidden_size=32, intermediate_size=64, num_hidden_layers=1)
    losses = pretrain.pretrain(model, tokenizer, stages=((1.0, 25),), batch_size=8, learning_rate=1e-2, progress=False)
    assert losses[0] > 5.0  # about log(vocabulary) per token at random init
    assert sum(losses[-5:]) / 5 < 0.5 * losses[0]
    assert not any(p.requires_grad for p in model.parameters())


def test_the_shipped_base_plays_like_its_teacher(tokenizer):
    """gemlab/tiny answers in format and puts more than the sloppy player's spread on the
    bisection guess, but far from all of it: RL has something to sharpen."""
    model = registry.build(registry.TINY)
    before, numbers, after = pretrain.answer_tokens(tokenizer)
    states = pretrain.game_states("game:GuessTheNumber-v0-easy", skill=pretrain.SKILL, seed=99, tokenizer=tokenizer)
    middle, fmt = [], []
    with torch.no_grad():
        for _ in range(40):
            state = next(states)
            probs = model(input_ids=torch.tensor([state.prompt + before])).logits[0, -1].softmax(-1)
            middle.append(float(probs[numbers[state.middle]]))
            fmt.append(float(sum(probs[numbers[n]] for n in state.numbers)))
    assert min(fmt) > 0.95  # a number of the range follows "\boxed{"
    spread = (1 - pretrain.SKILL) / 10
    assert spread * 2 < sum(middle) / len(middle) < 0.6


def test_the_random_preset_is_the_same_model_before_pretraining():
    random_init, pretrained = registry.build(registry.TINY_RANDOM), registry.build(registry.TINY)
    assert random_init.state_dict().keys() == pretrained.state_dict().keys()
    weight = "model.embed_tokens.weight"
    assert not torch.equal(random_init.state_dict()[weight], pretrained.state_dict()[weight])
    assert pretrained.lm_head.weight.data_ptr() == pretrained.model.embed_tokens.weight.data_ptr()  # still tied


def test_tokenizer_keeps_numbers_whole_and_prompts_short(tokenizer):
    from gemlab.envs import make_envs
    from gemlab.templates import get_template

    assert all(len(tokenizer.encode(str(n), add_special_tokens=False)) == 1 for n in range(0, 101))
    observation, _ = make_envs("game:GuessTheNumber-v0-easy", 1)[0].reset()
    assert len(get_template("qwen3_game").render(observation, tokenizer)) < 60
    text = "Any text at all, even émojis 🙂 and 12345."
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_product_states_teach_the_right_product(tokenizer):
    states = pretrain.teacher_states("rg:products-1digit", skill=0.25, seed=4, tokenizer=tokenizer)
    for _ in range(20):
        state = next(states)
        a, b = map(int, re.search(r"multiplication: (\d) \* (\d)\.", tokenizer.decode(state.prompt)).groups())
        assert state.middle == state.guess == a * b and state.numbers == range(0, 82)


def test_sum_states_teach_the_right_sum(tokenizer):
    states = pretrain.teacher_states("rg:sums-1digit", skill=0.25, seed=4, tokenizer=tokenizer)
    seen = set()
    for _ in range(200):
        state = next(states)
        a, b = map(int, re.search(r"Calculate (\d+) \+ (\d+)\.", tokenizer.decode(state.prompt)).groups())
        assert state.middle == state.guess == a + b and state.numbers == range(0, 21)
        seen |= {a, b}
    assert seen == set(range(0, 11))  # reasoning-gym's one-digit numbers, 10 included


def test_guess20_states_use_the_wide_range(tokenizer):
    states = pretrain.teacher_states("game:GuessTheNumber-v0-1to20", skill=1.0, seed=0, tokenizer=tokenizer)
    first = next(states)
    assert first.numbers == range(1, 21) and first.middle == 10
    assert "between 1 and 20" in tokenizer.decode(first.prompt)


def test_study_bases_are_their_own_weights():
    weights = {name: registry.build(name).model.embed_tokens.weight for name in registry.BASES}
    assert torch.equal(weights["gemlab/tiny"], registry.build(registry.TINY_CHAT).model.embed_tokens.weight[:-6])
    names = list(weights)
    assert all(not torch.equal(weights[a], weights[b]) for a in names for b in names if a < b)


def test_chat_format_tokens_are_single_and_change_no_other_text():
    """In gemlab/tiny-chat, <think>, </think>, <tool_call>... are one token each (tinker-cookbook's
    Qwen3 renderers assert it), and every text of the tokenizer's corpus tokenizes exactly as the
    trained file does."""
    from tokenizers import Tokenizer

    tokenizer = load_tiny_tokenizer(chat_markers=True)
    for token in CHAT_FORMAT_TOKENS:
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    assert (
        tokenizer.decode(tokenizer.encode("<think>\nhmm</think>\n\n5", add_special_tokens=False))
        == "<think>\nhmm</think>\n\n5"
    )
    trained = Tokenizer.from_file(str(TOKENIZER_FILE))
    for text in tokenizer_corpus()[::25]:
        assert tokenizer.encode(text, add_special_tokens=False) == trained.encode(text).ids


def test_the_new_tokens_rows_leave_the_base_sampling_as_before(tokenizer):
    """The appended rows sit at the embeddings' mean: the shipped base gives them (almost) no mass."""
    chat_tokenizer = load_tiny_tokenizer(chat_markers=True)
    model = registry.build(registry.TINY_CHAT)
    assert model.get_input_embeddings().weight.shape[0] == len(chat_tokenizer) == len(tokenizer) + 6
    new_ids = chat_tokenizer.convert_tokens_to_ids(["<think>", "</think>", "<tool_call>"])
    states = pretrain.game_states("game:GuessTheNumber-v0-easy", skill=pretrain.SKILL, seed=7, tokenizer=tokenizer)
    with torch.no_grad():
        for _ in range(10):
            probs = model(input_ids=torch.tensor([next(states).prompt])).logits[0].softmax(-1)
            assert float(probs[:, new_ids].max()) < 1e-6
