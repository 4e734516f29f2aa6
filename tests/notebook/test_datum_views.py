"""Datum views: the position table, tokens colored by advantage, the plot of where a datum trains."""

import matplotlib

matplotlib.use("Agg")

import pytest

from gemlab.datums import policy_gradient_datum
from gemlab.notebook import datum_views
from gemlab.templates import get_template
from gemlab.tiny.model import load_tiny_tokenizer

TOKENIZER = load_tiny_tokenizer()


def test_datum_views_mark_action_tokens():
    prompt = get_template("qwen3_game").render("Guess.", TOKENIZER)
    action = TOKENIZER.encode("\\boxed{5}") + [TOKENIZER.eos_token_id]
    datum = policy_gradient_datum(prompt, action, [-0.5] * len(action), advantage=1.3)
    table = datum_views.datum_table(datum, TOKENIZER)
    assert len(table) == len(prompt) + len(action) - 1
    assert table["trained"].sum() == len(action) and table["advantage"].iloc[-1] == pytest.approx(1.3)
    html = str(datum_views.datum_html(datum, TOKENIZER))
    assert html.count("opacity:0.35") == len(prompt) - 1
    for tok in (TOKENIZER, None):
        fig = datum_views.plot_datum(datum, tok)
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_title(loc="left")
        labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
        assert fig.axes[1].get_ylabel() and len(labels) == len(action) + 8  # 8 prompt positions of context
        assert all(len(label) <= 34 for label in labels)  # whole-sentence tokens are cut, not drawn
        assert all(t.get_rotation() == 0 for t in fig.axes[1].get_yticklabels())
    assert labels[-1] == str(len(prompt) + len(action) - 2)
    named = [t.get_text() for t in datum_views.plot_datum(datum, TOKENIZER).axes[1].get_yticklabels()]
    assert named[-1].endswith("<|im_end|>") and any(label.endswith("\\boxed{") for label in named)
