"""Token views: one span per token, the templates' prompts, token counts and logprobs."""

import pytest

from gemlab.notebook import token_views
from gemlab.templates import TEMPLATES, get_template
from gemlab.tiny.model import load_tiny_tokenizer

TOKENIZER = load_tiny_tokenizer()


def test_render_tokens_one_span_per_token_and_escaped():
    ids = get_template("qwen3_game").render("a < b & c", TOKENIZER)
    html = str(token_views.render_tokens(ids, TOKENIZER))
    assert html.count("<span title=") == len(ids)
    assert "&lt;|im_start|&gt;" in html and "<|im_start|>" not in html
    assert "&amp;" in html
    assert "↵" in html  # newlines made visible


def test_render_tokens_values_and_mask_lengths_checked():
    ids = TOKENIZER.encode("hello world")
    with pytest.raises(ValueError):
        token_views.render_tokens(ids, TOKENIZER, values=[0.0])
    html = str(token_views.render_tokens(ids, TOKENIZER, values=[1.0] * len(ids), mask=[False] * len(ids)))
    assert "opacity:0.35" in html and "rgb(" in html


def test_compare_templates_has_every_template_with_its_token_count():
    html = str(token_views.compare_templates("Guess a number.", TOKENIZER))
    for name in TEMPLATES:
        count = len(get_template(name).render("Guess a number.", TOKENIZER))
        assert f"{name} <span" in html and f"— {count} tokens" in html


def test_template_token_counts_table():
    table = token_views.template_token_counts(["hi", "a longer observation"], TOKENIZER)
    assert list(table.columns[2:]) == list(TEMPLATES)
    assert (table["qwen3_game"] > table["no"]).all()


def test_logprob_table():
    ids = TOKENIZER.encode("\\boxed{5}")
    table = token_views.logprob_table(ids, [-0.5] * len(ids), TOKENIZER)
    assert len(table) == len(ids) and table["probability"].iloc[0] == pytest.approx(0.60653, rel=1e-4)
    with pytest.raises(ValueError):
        token_views.logprob_table(ids, [], TOKENIZER)
