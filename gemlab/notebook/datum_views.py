"""A policy-gradient datum position by position: a table of input and target tokens with their
logprobs and advantages, its target tokens colored by advantage, and a plot of where it trains."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from gemlab.notebook.html_block import Html
from gemlab.notebook.token_views import render_tokens, token_strings


def datum_table(datum: Any, tokenizer: Any) -> pd.DataFrame:
    """One row per position of a policy-gradient datum: input token, target token, whether the
    target is trained (advantage != 0 marks an action token), sampler logprob and advantage."""
    inputs = datum.model_input.to_ints()
    fields = {key: value.tolist() for key, value in datum.loss_fn_inputs.items()}
    targets = [int(t) for t in fields["target_tokens"]]
    frame = pd.DataFrame(
        {
            "input": [repr(t) for t in token_strings(inputs, tokenizer)],
            "target": [repr(t) for t in token_strings(targets, tokenizer)],
            "target id": targets,
        }
    )
    if "advantages" in fields:
        frame["sampler logprob"] = fields["logprobs"]
        frame["advantage"] = fields["advantages"]
        frame["trained"] = [a != 0.0 for a in fields["advantages"]]
    if "weights" in fields:
        frame["weight"] = fields["weights"]
        frame["trained"] = [w != 0.0 for w in fields["weights"]]
    return frame.rename_axis("position")


def datum_html(datum: Any, tokenizer: Any, *, title: str | None = None) -> Html:
    """The datum's target tokens as spans colored by advantage; prompt positions greyed out."""
    fields = {key: value.tolist() for key, value in datum.loss_fn_inputs.items()}
    targets = [int(t) for t in fields["target_tokens"]]
    per_token = fields["advantages"] if "advantages" in fields else fields["weights"]
    name = "advantage" if "advantages" in fields else "weight"
    mask = [v != 0.0 for v in per_token]
    return render_tokens(targets, tokenizer, values=per_token, value_name=name, mask=mask, title=title)


def _tick_label(position: int, text: str, limit: int = 28) -> str:
    """``"59  \\boxed{"``: a position and its token's text (newlines as ``\\n``), cut to ``limit`` characters."""
    shown = text.replace("\n", "\\n").replace("\t", "\\t")
    shown = shown if shown.strip() else repr(text)
    return f"{position}  {shown if len(shown) <= limit else shown[: limit - 1] + '…'}"


def plot_datum(datum: Any, tokenizer: Any = None, *, context: int = 8, title: str | None = None) -> Any:
    """Draw a datum's per-token advantage (or weight): a strip of the whole datum, then its end.

    The top strip shows which positions are trained over the whole sequence (the prompt is long,
    the action short). Below, one horizontal bar per position for the last ``context`` prompt
    positions and every action position, labelled with the target token when ``tokenizer`` is
    given (long tokens are cut), read top to bottom like the text. Returns the figure.
    """
    import matplotlib.pyplot as plt

    fields = {key: value.tolist() for key, value in datum.loss_fn_inputs.items()}
    name = "advantages" if "advantages" in fields else "weights"
    values = np.asarray(fields[name], dtype=float)
    trained = np.flatnonzero(values != 0.0)
    first = int(trained[0]) if trained.size else len(values)
    start = max(0, first - context)
    zoom = np.arange(start, len(values))
    value_label = "advantage A (the transition's normalized return)" if name == "advantages" else "loss weight"
    fig, (top, bottom) = plt.subplots(
        2,
        1,
        figsize=(9, 1.9 + 0.3 * len(zoom)),
        constrained_layout=True,
        gridspec_kw={"height_ratios": [0.7, 0.3 * len(zoom)]},
    )

    top.broken_barh([(-0.5, first)], (0, 1), color="#bdbdbd")
    top.broken_barh([(first - 0.5, len(values) - first)], (0, 1), color="#1565c0")
    top.text(first / 2, 0.5, f"prompt: {first} positions, not trained", ha="center", va="center", fontsize=10)
    top.annotate(
        f"action: {len(values) - first} trained", xy=(len(values) - 0.5, 1), xytext=(len(values) - 0.5, 1.55),
        ha="right", va="bottom", fontsize=10, color="#1565c0", annotation_clip=False,
    )  # fmt: skip
    top.set_xlim(-0.5, len(values) - 0.5)
    top.set_ylim(0, 1)
    top.set_yticks([])
    top.set_xlabel("position in the datum (target token index)")
    top.set_title(f"The whole datum: {len(values)} positions", loc="left", pad=22)

    colors = np.where(values[start:] > 0, "#2e7d32", np.where(values[start:] < 0, "#c62828", "#bdbdbd"))
    rows = np.arange(len(zoom))
    bottom.barh(rows, values[start:], color=colors, height=0.7)
    if trained.size:
        bottom.axhspan(first - start - 0.5, len(zoom) - 0.5, color="#1565c0", alpha=0.08)
    bottom.axvline(0, color="#444", lw=0.8)
    if tokenizer is not None:
        texts = token_strings([int(t) for t in fields["target_tokens"]][start:], tokenizer)
        labels = [_tick_label(int(p), t) for p, t in zip(zoom, texts, strict=True)]
    else:
        labels = [str(int(p)) for p in zoom]
    bottom.set_yticks(rows, labels, fontsize=9, fontfamily="monospace")
    bottom.set_ylim(len(zoom) - 0.5, -0.5)  # the text reads top to bottom
    bottom.set_xlabel(value_label)
    bottom.set_ylabel("position and target token" if tokenizer is not None else "position")
    limit = float(np.max(np.abs(values))) if values.size and np.max(np.abs(values)) > 0 else 1.0
    bottom.set_xlim(-1.15 * limit, 1.15 * limit)
    default = (
        f"Its end: A = 0 on the prompt, A = {values[first]:+.3f} on every action token (shaded)"
        if name == "advantages" and trained.size
        else "Its end: weight 0 on the prompt, 1 on every answer token (shaded)"
    )
    bottom.set_title(title or default, loc="left", fontsize=11)
    bottom.grid(alpha=0.3, axis="x")
    return fig
