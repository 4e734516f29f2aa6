"""Notebook views: tokens as colored spans, episodes turn by turn, datums token by token.

Every ``*_html`` function returns an :class:`Html` block, which Jupyter renders as HTML and
``str()`` turns back into its source (so scripts and tests can read it). Tables are pandas
DataFrames; plots are matplotlib axes. Nothing here needs a backend: the functions take tokens,
a tokenizer, transitions, episodes or datums.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gemlab.notebook.redraw import RedrawBudget
from gemlab.plots import KL_MIN_SPAN, LABELS, floor_y_span
from gemlab.returns import discounted_returns
from gemlab.episodes import Episode, play_turn
from gemlab.templates import TEMPLATES, get_template

# Pastel backgrounds that alternate between neighbouring tokens; dark text stays readable on them
# in JupyterLab's light and dark themes alike.
SPAN_COLORS = ("#ffe3a3", "#b9e6ff", "#ffc9de", "#c8f2c2", "#e2d4ff")
SPECIAL_COLOR = "#4b4b4b"
_BASE_CSS = "font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; line-height: 1.9;"


@dataclass(frozen=True)
class Html:
    """A block of HTML that Jupyter displays rendered; ``str(block)`` is its source."""

    source: str

    def _repr_html_(self) -> str:
        return self.source

    def __str__(self) -> str:
        return self.source

    def __repr__(self) -> str:
        return f"<Html block, {len(self.source):,} characters: displayed as HTML in Jupyter>"

    def __add__(self, other: Html | str) -> Html:
        return Html(self.source + str(other))


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


# ----- tokens ---------------------------------------------------------------------------------
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
            out.append(_esc(char))
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
    for index, (token, text) in enumerate(zip(ids, texts)):
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
        spans.append(f'<span title="{_esc(tip)}" style="{style}">{_visible(text)}</span>')
    head = f'<div style="font-weight:600; margin-bottom:4px">{_esc(title)}</div>' if title else ""
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
            '<div style="flex:1 1 420px; min-width:320px; border:1px solid #ccc; border-radius:6px; padding:8px; margin:4px;">'
            f'<div style="font-weight:700">{_esc(name)} <span style="font-weight:400; color:#666">'
            f"— {len(ids)} tokens</span></div>"
            f'<div style="color:#666; font-size:12px; margin-bottom:6px">{_esc(template.description)}</div>'
            f"{spans}</div>"
        )
    return Html(f'<div style="display:flex; flex-wrap:wrap">{"".join(cards)}</div>')


def template_token_counts(observations: Sequence[str], tokenizer: Any, names: Sequence[str] | None = None) -> pd.DataFrame:
    """Prompt length in tokens for each observation (rows) under each template (columns)."""
    names = list(names or TEMPLATES)
    rows = []
    for observation in observations:
        row = {"observation (start)": observation[:40].replace("\n", " ") + ("…" if len(observation) > 40 else "")}
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


# ----- episodes -------------------------------------------------------------------------------
def new_text(previous: str, current: str) -> tuple[str, str]:
    """Split ``current`` into (what it repeats of ``previous``, what is new), at a line boundary.

    GEM's ``concat`` wrapper makes each observation the previous one plus the latest feedback, so
    the new part is what the game just said.
    """
    common = len(os.path.commonprefix([previous, current]))
    cut = current.rfind("\n", 0, common) + 1  # start of the line where the two texts part
    return current[:cut], current[cut:]


def _reward_badge(reward: float) -> str:
    if reward >= 1.0:
        color = "#1b7f3b"
    elif reward > 0:
        color = "#5f9e2f"
    elif reward < 0:
        color = "#c62828"
    else:
        color = "#777"
    return (
        f'<span style="background:{color}; color:#fff; border-radius:10px; padding:1px 8px; '
        f'font-weight:600; white-space:nowrap">reward {reward:+.3g}</span>'
    )


def _outcome(episode: Episode) -> tuple[str, str]:
    """The episode's state in words and a color: in progress, won, lost, or ended invalid."""
    if not episode.transitions:
        return "not started", "#777"
    last = episode.transitions[-1]
    if not last.done:
        return "in progress", "#1565c0"
    if episode.won:
        return "won", "#1b7f3b"
    if last.reward < 0:
        return "ended by an invalid action", "#c62828"
    return "lost", "#b26a00"


# One row of the episode viewer is a wrapping flex box, not a table: JupyterLab's table styles
# right-align cells and squeeze columns, and a flex row wraps its columns below each other in a
# narrow window instead of breaking words. The header row uses the same boxes, so it wraps alike.
_ROW = "display:flex; flex-wrap:wrap; gap:4px 8px; align-items:flex-start; text-align:left; padding:4px 0;"
_COLUMNS = ("flex:0 0 56px;", "flex:3 1 320px; min-width:0;", "flex:2 1 220px; min-width:0;", "flex:0 0 110px;")
_PRE = "white-space:pre-wrap; overflow-wrap:break-word; word-break:normal; text-align:left; margin:0; padding:6px; border-radius:4px; font-size:12px; line-height:1.45;"


def _row(cells: Sequence[str], extra: str = "") -> str:
    return f'<div style="{_ROW}{extra}">' + "".join(f'<div style="{style}">{cell}</div>' for style, cell in zip(_COLUMNS, cells)) + "</div>"


def episode_html(
    episode: Episode,
    *,
    gamma: float | None = None,
    title: str | None = None,
    only_new_text: bool = True,
    max_chars: int = 1500,
) -> Html:
    """An episode turn by turn: what the env said, what the policy answered, the reward.

    With ``only_new_text`` each observation shows only what it adds to the previous one (the
    repeated history folds into a "history" toggle). With ``gamma`` each turn also shows its
    discounted return ``G_t``.
    """
    rewards = [t.reward for t in episode.transitions]
    returns = discounted_returns(rewards, gamma) if gamma is not None else None
    outcome, color = _outcome(episode)
    header = (
        f'<div style="margin-bottom:6px; text-align:left"><b>{_esc(title or f"Episode (env {episode.env_index})")}</b> — '
        f'<span style="color:{color}; font-weight:700">{outcome}</span> after {episode.num_turns} turn(s), '
        f"total reward <b>{episode.total_reward:+.3g}</b></div>"
    )
    rows = [_row(["", "observation (new text)", "action", "reward"], "font-weight:700; border-bottom:1px solid #ccc;")]
    previous = ""
    done_note = '<div style="color:#666; font-size:11px">episode ends</div>'
    for index, transition in enumerate(episode.transitions):
        observation = transition.observation
        old, new = new_text(previous, observation) if only_new_text and index > 0 else ("", observation)
        previous = observation
        if len(new) > max_chars:
            new = new[: max_chars // 2] + f"\n… ({len(new) - max_chars} characters cut) …\n" + new[-max_chars // 2 :]
        folded = (
            f'<details style="color:#777"><summary style="cursor:pointer">history ({old.count(chr(10))} lines)</summary>'
            f'<pre style="{_PRE} padding:2px 0">{_esc(old)}</pre></details>'
            if old
            else ""
        )
        action = transition.action if transition.action.strip() else "(empty)"
        notes = []
        if transition.act_tokens:
            notes.append(f"{len(transition.act_tokens)} tokens")
        if transition.stop_reason == "length":
            notes.append("cut at max_tokens")
        if returns is not None:
            notes.append(f"G<sub>{index}</sub> = {returns[index]:+.3f}")
        rows.append(
            _row(
                [
                    f'<b style="white-space:nowrap">turn {index}</b>',
                    f'{folded}<pre style="{_PRE} background:#f3f3f3; color:#111">{_esc(new)}</pre>',
                    f'<pre style="{_PRE} background:#e3f0ff; color:#0b3d91; border-left:3px solid #1565c0">{_esc(action)}</pre>'
                    f'<div style="color:#666; font-size:11px">{" · ".join(notes)}</div>',
                    _reward_badge(transition.reward) + (done_note if transition.done else ""),
                ],
                "border-top:1px solid #eee;",
            )
        )
    body = "".join(rows)
    return Html(f'<div style="border:1px solid #ccc; border-radius:6px; padding:8px; margin:4px 0; font-size:12.5px; text-align:left">{header}{body}</div>')


def episodes_html(episodes: Sequence[Episode], *, limit: int = 8, gamma: float | None = None, open_first: bool = True) -> Html:
    """Several episodes, each folded under a one-line summary (the first one open)."""
    parts = []
    for index, episode in enumerate(episodes[:limit]):
        outcome, color = _outcome(episode)
        summary = (
            f"episode {index} (env {episode.env_index}): "
            f'<span style="color:{color}; font-weight:700">{outcome}</span>, '
            f"{episode.num_turns} turn(s), return {episode.total_reward:+.3g}"
        )
        body = episode_html(episode, gamma=gamma, title=f"Episode {index}").source
        parts.append(f'<details{" open" if open_first and index == 0 else ""}><summary style="cursor:pointer">{summary}</summary>{body}</details>')
    more = f'<div style="color:#666">… and {len(episodes) - limit} more episodes</div>' if len(episodes) > limit else ""
    return Html("".join(parts) + more)


def side_by_side(blocks: Mapping[str, Html | str], *, min_width: int = 380) -> Html:
    """Blocks (episode viewers, token views) next to each other under their names; in a window
    too narrow for two columns of ``min_width`` pixels they stack."""
    columns = "".join(
        f'<div style="flex:1 1 {min_width}px; min-width:0; text-align:left"><div style="font-weight:700; font-size:14px; margin:2px 0 4px">{_esc(name)}</div>{block}</div>'
        for name, block in blocks.items()
    )
    return Html(f'<div style="display:flex; flex-wrap:wrap; gap:12px; align-items:flex-start">{columns}</div>')


def episode_table(episodes: Sequence[Episode]) -> pd.DataFrame:
    """One row per episode: env, turns, return, outcome, action tokens, whether it ended invalid."""
    rows = []
    for episode in episodes:
        last = episode.transitions[-1] if episode.transitions else None
        rows.append(
            {
                "env": episode.env_index,
                "turns": episode.num_turns,
                "return": episode.total_reward,
                "won": episode.won,
                "invalid end": bool(last is not None and last.reward < 0),
                "action tokens": sum(len(t.act_tokens) for t in episode.transitions),
                "cut at max_tokens": sum(t.stop_reason == "length" for t in episode.transitions),
            }
        )
    return pd.DataFrame(rows, columns=["env", "turns", "return", "won", "invalid end", "action tokens", "cut at max_tokens"])


def episode_stats(episodes: Sequence[Episode]) -> pd.DataFrame:
    """A small summary of a batch: mean, std, min and max of each per-episode statistic."""
    table = episode_table(episodes).drop(columns=["env"]).astype(float)
    stats = table.agg(["mean", "std", "min", "max"]).T
    stats.insert(0, "episodes", len(table))
    return stats


# ----- datums ---------------------------------------------------------------------------------
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
    per_token = fields.get("advantages", fields.get("weights"))
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
        2, 1, figsize=(9, 1.9 + 0.3 * len(zoom)), constrained_layout=True, gridspec_kw={"height_ratios": [0.7, 0.3 * len(zoom)]}
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
        labels = [_tick_label(int(p), t) for p, t in zip(zoom, texts)]
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


# ----- live metrics ---------------------------------------------------------------------------
class LiveMetrics:
    """A figure of a few metrics that redraws in place as training steps come in.

    It redraws only as often as ``RedrawBudget`` allows (drawing takes at most 5% of the wall
    time, however slow the machine), and always after the last step when ``total`` is given;
    ``finish()`` draws the last state after a loop that stopped early. ``summary()`` says what
    the redraws cost.

    >>> live = LiveMetrics(["sampler/success_rate", "sampler/episode_return"], total=10)  # doctest: +SKIP
    >>> for _ in range(10):                                                               # doctest: +SKIP
    ...     live.update(trainer.step())
    """

    def __init__(
        self,
        metrics: Sequence[str],
        *,
        title: str = "Live training metrics",
        labels: Mapping[str, str] | None = None,
        total: int | None = None,
        budget: RedrawBudget | None = None,
    ) -> None:
        self.metrics = list(metrics)
        self.title = title
        self.labels = {**LABELS, **(labels or {})}
        self.total = total
        self.budget = budget or RedrawBudget()
        self.rows: list[dict[str, float]] = []
        self._handle: Any = None
        self._drawn = 0  # rows in the figure on screen
        # hold the figure's place from the start, so a progress bar printed after it stays below it
        self._show(Html(f"<i>{_esc(title)}: the curves appear after the first step.</i>"))

    def update(self, row: Mapping[str, float]) -> None:
        """Add one step's metrics; redraw if the budget allows it (always at step ``total``)."""
        self.rows.append(dict(row))
        if self.budget.due(final=self.total is not None and len(self.rows) >= self.total):
            self._redraw()

    def finish(self) -> None:
        """Draw the last state if it is not on screen yet (after a loop stopped early)."""
        if self._drawn < len(self.rows):
            self._redraw()

    def summary(self) -> str:
        """What the live chart cost: redraws, seconds, share of the wall time since it was made."""
        b = self.budget
        return f"live chart: {b.redraws} redraw(s) for {len(self.rows)} step(s), {b.spent:.1f} s, {b.overhead():.1%} of the wall time"

    def _redraw(self) -> None:
        import matplotlib.pyplot as plt

        with self.budget.drawing():
            figure = self.figure()
            self._show(figure)
            plt.close(figure)
        self._drawn = len(self.rows)

    def _show(self, content: Any) -> None:
        """Show ``content`` in this chart's place in the notebook (nothing outside IPython)."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:
            return
        if get_ipython() is None:  # a script: nothing to draw on
            return
        if self._handle is None:
            self._handle = display(content, display_id=True)
        else:
            self._handle.update(content)

    def _progress(self) -> str:
        """``step 12/100, about 1 min 40 s left`` from the steps' wall times so far."""
        done = len(self.rows)
        if self.total is None:
            return f"after {done} step(s)"
        times = [row["time/step"] for row in self.rows[1:] or self.rows if "time/step" in row]
        left = self.total - done
        if not times or left <= 0:
            return f"step {done}/{self.total}"
        seconds = round(float(np.median(times)) * left)
        eta = f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"
        return f"step {done}/{self.total}, about {eta} left"

    def figure(self) -> Any:
        """The current figure: one panel per metric against the training step."""
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        frame = pd.DataFrame(self.rows)
        fig, axes = plt.subplots(1, len(self.metrics), figsize=(4.2 * len(self.metrics), 3.2), constrained_layout=True, squeeze=False)
        for ax, metric in zip(axes[0], self.metrics):
            if metric in frame:
                ax.plot(frame["step"], frame[metric], marker="o", markersize=5 if len(frame) <= 30 else 2.5, lw=1.5)
            label = self.labels.get(metric, metric)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("training step")
            ax.set_ylabel(label)
            ax.set_title(label.split(" (")[0][:1].upper() + label.split(" (")[0][1:])
            ax.grid(alpha=0.3)
            if metric.startswith("train/kl_"):
                floor_y_span(ax, KL_MIN_SPAN)
        fig.suptitle(f"{self.title} ({self._progress()})")
        return fig


def metrics_table(rows: Iterable[Mapping[str, float]], columns: Sequence[str] | None = None, *, readable: bool = False) -> pd.DataFrame:
    """Training metrics (``trainer.history``) as a table indexed by step, selected columns only.

    ``readable`` names the columns by their labels (``"turns per episode"`` rather than
    ``"sampler/num_turns_per_episode"``): words wrap, so the table fits a notebook's width."""
    frame = pd.DataFrame(list(rows))
    if "step" in frame:
        frame = frame.set_index(frame["step"].astype(int)).drop(columns="step")
    if columns is not None:
        frame = frame[[c for c in columns if c in frame]]
    if readable:
        frame = frame.rename(columns=LABELS)
    return frame


# ----- playing by hand ------------------------------------------------------------------------
class InteractiveGame:
    """Play a GEM text game by hand in the notebook: type an action and press Enter (or *Play*);
    under a status line (in progress, won, lost) the game's newest words come first, then the
    episode so far in the episode viewer.
    *New game* resets the env; playing after the end is refused with a message.

    ``InteractiveGame(env).widget`` is the ipywidgets box to display; ``play(action)`` and
    ``new_game()`` do the same as the widget (handy in scripts and tests).
    """

    def __init__(self, env: Any, *, gamma: float | None = None) -> None:
        import ipywidgets as widgets

        self.env = env
        self.gamma = gamma
        self.episode = Episode()
        self.observation = ""
        self.done = False
        # continuous_update=False: the value reaches the kernel on Enter (ipywidgets 8's way to submit)
        self.action_box = widgets.Text(
            placeholder="your action, e.g. \\boxed{5}, then Enter", description="Action:", continuous_update=False,
            layout=widgets.Layout(width="420px", max_width="100%")
        )
        self.play_button = widgets.Button(description="Play", button_style="primary")
        self.new_button = widgets.Button(description="New game")
        self.message = widgets.HTML()
        self.output = widgets.HTML()
        self.action_box.observe(lambda change: self.play(change["new"]) if change["new"] else None, names="value")
        self.play_button.on_click(lambda _: self.play(self.action_box.value))
        self.new_button.on_click(lambda _: self.new_game())
        controls = widgets.HBox([self.action_box, self.play_button, self.new_button], layout=widgets.Layout(flex_flow="row wrap"))
        self.widget = widgets.VBox([controls, self.message, self.output])
        self.new_game()

    @property
    def status(self) -> str:
        """"in progress", "won", "lost" or "ended by an invalid action"."""
        return _outcome(self.episode)[0] if self.episode.transitions else "in progress"

    def new_game(self) -> None:
        """Reset the env and clear the episode."""
        self.observation, _ = self.env.reset()
        self.episode = Episode()
        self.done = False
        self._draw("")

    def play(self, action: str) -> None:
        """Send ``action`` to the env and record the turn; refused (with a message) once the game is over."""
        if self.done:
            self.action_box.value = ""
            self._draw(f"The game is over ({self.status}): <b>{_esc(action)}</b> was not played. Press <b>New game</b> to play again.")
            return
        if not action.strip():
            self._draw("Type an action first, e.g. <code>\\boxed{5}</code>.")
            return
        transition, self.observation = play_turn(self.env, self.observation, action)  # the turn of the one episode loop
        self.episode.transitions.append(transition)
        self.done = transition.done
        self.action_box.value = ""
        self._draw("")

    def _draw(self, message: str) -> None:
        status, color = _outcome(self.episode) if self.episode.transitions else ("in progress", "#1565c0")
        self.message.value = (
            f'<div style="text-align:left">Game <b style="color:{color}">{status}</b> after {self.episode.num_turns} turn(s)'
            + (f' — <span style="color:#c62828">{message}</span>' if message else "")
            + "</div>"
        )
        if self.done:
            # what the final observation adds, without the prompt for a guess that will never come
            added = new_text(self.episode.transitions[-1].observation, self.observation)[1]
            last = " ".join(line for line in added.splitlines() if line.strip() and not line.startswith("Enter your"))
            status_html = f'<div style="margin-top:6px; text-align:left"><b>Game over.</b> The game\'s last words: <i>{_esc(last)}</i> Press <b>New game</b> to play again.</div>'
        else:  # only what the game just said (the history repeats below), right under the action box
            said = new_text(self.episode.transitions[-1].observation, self.observation)[1] if self.episode.transitions else self.observation
            status_html = f'<div style="margin-top:6px; text-align:left">The game says:</div><pre style="{_PRE} background:#f3f3f3; color:#111">{_esc(said.strip())}</pre>'
        history = episode_html(self.episode, gamma=self.gamma, title="Your game so far").source if self.episode.transitions else ""
        self.output.value = status_html + history  # the newest first: no scrolling down to read the hint

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
