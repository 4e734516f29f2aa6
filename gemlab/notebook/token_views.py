"""Tokens as the model sees them: colored spans (one per token, so every boundary shows), the
templates' prompts side by side, and tables of token counts and sampled logprobs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

import numpy as np
import pandas as pd

from gemlab.notebook.html_block import Html
from gemlab.templates import TEMPLATES, get_template

# Pastel backgrounds that alternate between neighbouring tokens; dark text stays readable on them
# in JupyterLab's light and dark themes alike.
SPAN_COLORS = ("#ffe3a3", "#b9e6ff", "#ffc9de", "#c8f2c2", "#e2d4ff")
SPECIAL_COLOR = "#4b4b4b"
_BASE_CSS = (
    "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; line-height: 1.9;"
)


def token_strings(token_ids: Sequence[int], tokenizer: Any) -> list[str]:
    """Each token decoded on its own (special tokens spelled out), in order.

    A byte-level token that holds part of a multi-byte character decodes to ``"\\ufffd"``.
    """
    return [tokenizer.decode([int(t)], skip_special_tokens=False) for t in token_ids]


def _visible(text: str) -> str:
    """Escape a token's text and make its whitespace visible: ``·`` for spaces, ``↵`` for newlines."""
    out = []
    for char in text:
        if char == " ":
            out.append('<span style="opacity:0.45">·</span>')
        elif char == "\n":
            out.append('<span style="opacity:0.45">↵</span><br>')
        elif char == "\t":
            out.append('<span style="opacity:0.45">→</span>')
        else:
            out.append(escape(char))
    return "".join(out)


def _value_color(value: float, scale: float) -> str:
    """White at 0, green for positive and red for negative values, saturating at ``scale``."""
    if not math.isfinite(value) or scale <= 0:
        return "#ffffff"
    x = max(-1.0, min(1.0, value / scale))
    strength = abs(x) ** 0.7
    if x >= 0:
        r, g, b = 255 - 140 * strength, 255 - 40 * strength, 255 - 140 * strength
    else:
        r, g, b = 255 - 20 * strength, 255 - 150 * strength, 255 - 150 * strength
    return f"rgb({int(r)},{int(g)},{int(b)})"


def render_tokens(
    token_ids: Sequence[int],
    tokenizer: Any,
    *,
    values: Sequence[float] | None = None,
    value_name: str = "value",
    mask: Sequence[bool] | None = None,
    scale: float | None = None,
    title: str | None = None,
) -> Html:
    """The tokens as adjacent colored spans, so every token boundary is visible.

    Without ``values`` neighbouring tokens alternate pastel colors and special tokens (chat
    markers) are dark. With ``values`` (one per token: a logprob, an advantage) each span is
    colored by its value, green above zero and red below, saturating at ``scale`` (default: the
    largest absolute value). Tokens whose ``mask`` is False are greyed out. Hover a token for its
    position, id and value.
    """
    ids = [int(t) for t in token_ids]
    texts = token_strings(ids, tokenizer)
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    if values is not None and len(values) != len(ids):
        raise ValueError(f"{len(ids)} tokens but {len(values)} values")
    if mask is not None and len(mask) != len(ids):
        raise ValueError(f"{len(ids)} tokens but {len(mask)} mask entries")
    if values is not None and scale is None:
        finite = [abs(float(v)) for v in values if math.isfinite(float(v))]
        scale = max(finite, default=1.0) or 1.0
    spans = []
    for index, (token, text) in enumerate(zip(ids, texts, strict=True)):
        tip = f"#{index}  id {token}  {text!r}"
        style = "padding:1px 1px; margin:0 1px 0 0; border-radius:3px; color:#111;"
        if values is not None:
            value = float(values[index])
            tip += f"  {value_name} {value:.4g}"
            style += f"background:{_value_color(value, float(scale or 1.0))}; border:1px solid #bbb;"
        elif token in special:
            style += f"background:{SPECIAL_COLOR}; color:#fff; font-weight:600;"
        else:
            style += f"background:{SPAN_COLORS[index % len(SPAN_COLORS)]};"
        if mask is not None and not mask[index]:
            style += "opacity:0.35;"
        spans.append(f'<span title="{escape(tip)}" style="{style}">{_visible(text)}</span>')
    head = f'<div style="font-weight:600; margin-bottom:4px">{escape(title)}</div>' if title else ""
    # <wbr> lets lines break between tokens (the spans hold no real spaces to break at)
    return Html(f'<div style="{_BASE_CSS} overflow-wrap:anywhere">{head}{"<wbr>".join(spans)}</div>')


def compare_templates(observation: str, tokenizer: Any, names: Sequence[str] | None = None) -> Html:
    """One card per template: its name, description, token count and the prompt as token spans."""
    cards = []
    for name in names or list(TEMPLATES):
        template = get_template(name)
        ids = template.render(observation, tokenizer)
        spans = render_tokens(ids, tokenizer).source
        cards.append(
            '<div style="flex:1 1 420px; min-width:320px; border:1px solid #ccc; border-radius:6px; '
            'padding:8px; margin:4px;">'
            f'<div style="font-weight:700">{escape(name)} <span style="font-weight:400; color:#666">'
            f"— {len(ids)} tokens</span></div>"
            f'<div style="color:#666; font-size:12px; margin-bottom:6px">{escape(template.description)}</div>'
            f"{spans}</div>"
        )
    return Html(f'<div style="display:flex; flex-wrap:wrap">{"".join(cards)}</div>')


def template_token_counts(
    observations: Sequence[str], tokenizer: Any, names: Sequence[str] | None = None
) -> pd.DataFrame:
    """Prompt length in tokens for each observation (rows) under each template (columns)."""
    names = list(names or TEMPLATES)
    rows = []
    for observation in observations:
        row: dict[str, str | int] = {
            "observation (start)": observation[:40].replace("\n", " ") + ("…" if len(observation) > 40 else "")
        }
        row["characters"] = len(observation)
        for name in names:
            row[name] = len(get_template(name).render(observation, tokenizer))
        rows.append(row)
    return pd.DataFrame(rows)


def logprob_table(token_ids: Sequence[int], logprobs: Sequence[float], tokenizer: Any) -> pd.DataFrame:
    """One row per sampled token: its position, id, text, logprob and probability."""
    if len(token_ids) != len(logprobs):
        raise ValueError(f"{len(token_ids)} tokens but {len(logprobs)} logprobs")
    texts = token_strings(token_ids, tokenizer)
    lps = np.asarray([float(x) for x in logprobs], dtype=float)
    return pd.DataFrame(
        {
            "token id": [int(t) for t in token_ids],
            "token": [repr(t) for t in texts],
            "logprob (nats)": lps,
            "probability": np.exp(lps),
        }
    ).rename_axis("position")
