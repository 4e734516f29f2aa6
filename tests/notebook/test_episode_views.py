"""The episode viewer: new text per turn, rewards, returns and outcomes; the batch table and summary."""

import pytest

from gemlab.episodes import Episode, Transition
from gemlab.notebook import episode_views


def episode(rewards, actions=None, env_index=0):
    observations = ["Start.\nEnter your next guess."]
    for turn in range(1, len(rewards)):
        observations.append(
            observations[-1].replace("Enter your next guess.", f"At turn {turn}, hint.\nEnter your next guess.")
        )
    actions = actions or [f"\\boxed{{{i}}}" for i in range(len(rewards))]
    return Episode(
        transitions=[
            Transition(
                [1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], r, i == len(rewards) - 1, observations[i], actions[i], "stop"
            )
            for i, r in enumerate(rewards)
        ],
        env_index=env_index,
    )


def test_new_text_splits_at_the_line_where_the_observation_grows():
    old, new = episode_views.new_text(
        "Intro\nEnter your next guess.", "Intro\nAt turn 1, hint.\nEnter your next guess."
    )
    assert old == "Intro\n" and new == "At turn 1, hint.\nEnter your next guess."


def test_episode_html_shows_turns_actions_rewards_and_returns():
    ep = episode([0.0, 0.0, 1.0])
    html = str(episode_views.episode_html(ep, gamma=0.9))
    assert "won" in html and html.count("turn ") >= 3
    assert "reward +1" in html and "\\boxed{2}" in html
    assert "G<sub>0</sub> = +0.810" in html
    assert "history (" in html  # repeated history folded
    lost = str(episode_views.episode_html(episode([0.0, -0.1])))
    assert "invalid action" in lost


def test_episodes_html_and_limit():
    html = str(episode_views.episodes_html([episode([1.0]), episode([0.0, 0.5]), episode([-0.1])], limit=2))
    assert html.count("<details") >= 2 and "1 more episodes" in html


def test_episode_table_and_stats():
    eps = [episode([0.0, 1.0]), episode([-0.1]), episode([0.0, 0.0, 0.5], env_index=2)]
    table = episode_views.episode_table(eps)
    assert table["won"].tolist() == [True, False, False]
    assert table["invalid end"].tolist() == [False, True, False]
    assert table["action tokens"].tolist() == [6, 3, 9]
    stats = episode_views.episode_stats(eps)
    assert stats.loc["turns", "mean"] == pytest.approx(2.0) and stats.loc["won", "max"] == 1.0
    assert stats["episodes"].iloc[0] == 3


def test_episode_in_progress_is_not_called_lost():
    unfinished = episode([0.0, 0.0])
    unfinished.transitions[-1].done = False
    assert "in progress" in str(episode_views.episode_html(unfinished)) and "lost" not in str(
        episode_views.episode_html(unfinished)
    )
    assert ">lost<" in str(episode_views.episode_html(episode([0.0, 0.0])))
