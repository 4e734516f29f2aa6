"""Templates: GEM's strings, the tokenizer's chat template, and the registry."""

import pytest

from gemlab.templates import TEMPLATES, get_template
from gemlab.tiny.model import load_tiny_tokenizer


def test_registry_has_gem_templates_and_chat():
    assert {"qwen3_game", "qwen3_general", "no", "chat", "chat_turns"} <= set(TEMPLATES)


def test_qwen3_game_matches_gem_text():
    text = get_template("qwen3_game").render_text("OBS")
    assert text == (
        "<|im_start|>user\nYou are playing language games. Make valid actions to win.\nObservation: OBS"
        "\nPlease reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert get_template("no").render_text("OBS") == "OBS"


def test_render_tokenizes_markers_as_single_tokens():
    tok = load_tiny_tokenizer()
    ids = get_template("qwen3_game").render("hello", tok)
    start = tok.convert_tokens_to_ids("<|im_start|>")
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert ids[0] == start and ids.count(start) == 2 and ids.count(end) == 1
    assert tok.decode(ids) == get_template("qwen3_game").render_text("hello")


def test_chat_template_uses_tokenizer():
    tok = load_tiny_tokenizer()
    assert get_template("chat").render_text("hi", tok) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    with pytest.raises(ValueError, match="needs a tokenizer"):
        get_template("chat").render_text("hi")


def test_unknown_template_lists_known_ones():
    with pytest.raises(ValueError, match="Unknown template 'qwen_game'.*qwen3_game.*Did you mean 'qwen3_game'"):
        get_template("qwen_game")


def test_chat_turns_continues_the_episode_as_one_conversation():
    """Turn 2's prompt is turn 1's prompt + the action as sampled + the new user message, token for
    token, and reads as the tokenizer's own chat template renders the whole conversation."""
    tok = load_tiny_tokenizer()
    template = get_template("chat_turns")
    first = template.render("What is 2 * 3?", tok)
    assert first == get_template("chat").render("What is 2 * 3?", tok)
    action = tok.encode("```python\nprint(2 * 3)\n```<|im_end|>", add_special_tokens=False)
    second = template.continue_tokens(first + action, "Code execution result: 6\n", tok)
    assert second[: len(first) + len(action)] == first + action
    conversation = [
        {"role": "user", "content": "What is 2 * 3?"},
        {"role": "assistant", "content": "```python\nprint(2 * 3)\n```"},
        {"role": "user", "content": "Code execution result: 6\n"},
    ]
    assert tok.decode(second) == tok.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)


def test_chat_turns_closes_an_action_cut_at_max_tokens():
    tok = load_tiny_tokenizer()
    template = get_template("chat_turns")
    first = template.render("Q", tok)
    cut = tok.encode("```python\nprint(", add_special_tokens=False)  # no end of turn: cut at max_tokens
    second = template.continue_tokens(first + cut, "R", tok)
    assert (
        tok.decode(second[len(first) + len(cut) :])
        == "<|im_end|>\n<|im_start|>user\nR<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_template_that_renders_each_turn_alone_does_not_continue():
    tok = load_tiny_tokenizer()
    with pytest.raises(ValueError, match="renders each turn on its own"):
        get_template("chat").continue_tokens([1, 2], "R", tok)
