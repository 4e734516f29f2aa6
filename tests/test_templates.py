"""Templates: GEM's strings, the tokenizer's chat template, and the registry."""

import pytest

from gemlab.templates import TEMPLATES, get_template
from gemlab.tiny.model import load_tiny_tokenizer


def test_registry_has_gem_templates_and_chat():
    assert {"qwen3_game", "qwen3_general", "no", "chat"} <= set(TEMPLATES)


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
