"""Episodes turn by turn: what the env said (only its new text), what the policy answered, the
reward and the outcome, as HTML; and a batch of episodes as a table and its summary."""

from __future__ import annotations

import os
from collections.abc import Sequence
from html import escape

import pandas as pd

from gemlab.episodes import Episode
from gemlab.notebook.html_block import Html
from gemlab.returns import discounted_returns


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


def outcome(episode: Episode) -> tuple[str, str]:
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
# A text block (an observation, an action) that wraps at word boundaries and keeps its line breaks.
TEXT_STYLE = (
    "white-space:pre-wrap; overflow-wrap:break-word; word-break:normal; text-align:left; margin:0; "
    "padding:6px; border-radius:4px; font-size:12px; line-height:1.45;"
)


def _row(cells: Sequence[str], extra: str = "") -> str:
    return (
        f'<div style="{_ROW}{extra}">'
        + "".join(f'<div style="{style}">{cell}</div>' for style, cell in zip(_COLUMNS, cells, strict=True))
        + "</div>"
    )


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
    state, color = outcome(episode)
    header = (
        '<div style="margin-bottom:6px; '
        f'text-align:left"><b>{escape(title or f"Episode (env {episode.env_index})")}</b> — '
        f'<span style="color:{color}; font-weight:700">{state}</span> after {episode.num_turns} turn(s), '
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
            f'<details style="color:#777"><summary style="cursor:pointer">history ({old.count(chr(10))} '
            'lines)</summary>'
            f'<pre style="{TEXT_STYLE} padding:2px 0">{escape(old)}</pre></details>'
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
                    f'{folded}<pre style="{TEXT_STYLE} background:#f3f3f3; color:#111">{escape(new)}</pre>',
                    f'<pre style="{TEXT_STYLE} background:#e3f0ff; color:#0b3d91; border-left:3px solid '
                    f'#1565c0">{escape(action)}</pre>'
                    f'<div style="color:#666; font-size:11px">{" · ".join(notes)}</div>',
                    _reward_badge(transition.reward) + (done_note if transition.done else ""),
                ],
                "border-top:1px solid #eee;",
            )
        )
    body = "".join(rows)
    return Html(
        '<div style="border:1px solid #ccc; border-radius:6px; padding:8px; margin:4px 0; font-size:12.5px; '
        f'text-align:left">{header}{body}</div>'
    )


def episodes_html(
    episodes: Sequence[Episode], *, limit: int = 8, gamma: float | None = None, open_first: bool = True
) -> Html:
    """Several episodes, each folded under a one-line summary (the first one open)."""
    parts = []
    for index, episode in enumerate(episodes[:limit]):
        state, color = outcome(episode)
        summary = (
            f"episode {index} (env {episode.env_index}): "
            f'<span style="color:{color}; font-weight:700">{state}</span>, '
            f"{episode.num_turns} turn(s), return {episode.total_reward:+.3g}"
        )
        body = episode_html(episode, gamma=gamma, title=f"Episode {index}").source
        parts.append(
            f'<details{" open" if open_first and index == 0 else ""}><summary '
            f'style="cursor:pointer">{summary}</summary>{body}</details>'
        )
    more = f'<div style="color:#666">… and {len(episodes) - limit} more episodes</div>' if len(episodes) > limit else ""
    return Html("".join(parts) + more)


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
    return pd.DataFrame(
        rows, columns=["env", "turns", "return", "won", "invalid end", "action tokens", "cut at max_tokens"]
    )


def episode_stats(episodes: Sequence[Episode]) -> pd.DataFrame:
    """A small summary of a batch: mean, std, min and max of each per-episode statistic."""
    table = episode_table(episodes).drop(columns=["env"]).astype(float)
    stats = table.agg(["mean", "std", "min", "max"]).T
    stats.insert(0, "episodes", len(table))
    return stats
