"""Notebook views: token spans, episode viewer, stats tables and datum views."""

import matplotlib

matplotlib.use("Agg")

import pytest

from gemlab.datums import policy_gradient_datum
from gemlab.notebook import viewer
from gemlab.notebook.redraw import RedrawBudget
from gemlab.episodes import Episode, Transition
from gemlab.templates import TEMPLATES, get_template
from gemlab.tiny.model import load_tiny_tokenizer

TOKENIZER = load_tiny_tokenizer()


def episode(rewards, actions=None, env_index=0):
    observations = ["Start.\nEnter your next guess."]
    for turn in range(1, len(rewards)):
        observations.append(observations[-1].replace("Enter your next guess.", f"At turn {turn}, hint.\nEnter your next guess."))
    actions = actions or [f"\\boxed{{{i}}}" for i in range(len(rewards))]
    return Episode(
        transitions=[
            Transition([1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], r, i == len(rewards) - 1, observations[i], actions[i], "stop")
            for i, r in enumerate(rewards)
        ],
        env_index=env_index,
    )


def test_render_tokens_one_span_per_token_and_escaped():
    ids = get_template("qwen3_game").render("a < b & c", TOKENIZER)
    html = str(viewer.render_tokens(ids, TOKENIZER))
    assert html.count("<span title=") == len(ids)
    assert "&lt;|im_start|&gt;" in html and "<|im_start|>" not in html
    assert "&amp;" in html
    assert "↵" in html  # newlines made visible


def test_render_tokens_values_and_mask_lengths_checked():
    ids = TOKENIZER.encode("hello world")
    with pytest.raises(ValueError):
        viewer.render_tokens(ids, TOKENIZER, values=[0.0])
    html = str(viewer.render_tokens(ids, TOKENIZER, values=[1.0] * len(ids), mask=[False] * len(ids)))
    assert "opacity:0.35" in html and "rgb(" in html


def test_html_block_renders_in_jupyter():
    block = viewer.Html("<b>x</b>")
    assert block._repr_html_() == "<b>x</b>" and str(block + "<i>y</i>") == "<b>x</b><i>y</i>"


def test_compare_templates_has_every_template_with_its_token_count():
    html = str(viewer.compare_templates("Guess a number.", TOKENIZER))
    for name in TEMPLATES:
        count = len(get_template(name).render("Guess a number.", TOKENIZER))
        assert f"{name} <span" in html and f"— {count} tokens" in html


def test_template_token_counts_table():
    table = viewer.template_token_counts(["hi", "a longer observation"], TOKENIZER)
    assert list(table.columns[2:]) == list(TEMPLATES)
    assert (table["qwen3_game"] > table["no"]).all()


def test_logprob_table():
    ids = TOKENIZER.encode("\\boxed{5}")
    table = viewer.logprob_table(ids, [-0.5] * len(ids), TOKENIZER)
    assert len(table) == len(ids) and table["probability"].iloc[0] == pytest.approx(0.60653, rel=1e-4)
    with pytest.raises(ValueError):
        viewer.logprob_table(ids, [], TOKENIZER)


def test_new_text_splits_at_the_line_where_the_observation_grows():
    old, new = viewer.new_text("Intro\nEnter your next guess.", "Intro\nAt turn 1, hint.\nEnter your next guess.")
    assert old == "Intro\n" and new == "At turn 1, hint.\nEnter your next guess."


def test_episode_html_shows_turns_actions_rewards_and_returns():
    ep = episode([0.0, 0.0, 1.0])
    html = str(viewer.episode_html(ep, gamma=0.9))
    assert "won" in html and html.count("turn ") >= 3
    assert "reward +1" in html and "\\boxed{2}" in html
    assert "G<sub>0</sub> = +0.810" in html
    assert "history (" in html  # repeated history folded
    lost = str(viewer.episode_html(episode([0.0, -0.1])))
    assert "invalid action" in lost


def test_episodes_html_and_limit():
    html = str(viewer.episodes_html([episode([1.0]), episode([0.0, 0.5]), episode([-0.1])], limit=2))
    assert html.count("<details") >= 2 and "1 more episodes" in html


def test_episode_table_and_stats():
    eps = [episode([0.0, 1.0]), episode([-0.1]), episode([0.0, 0.0, 0.5], env_index=2)]
    table = viewer.episode_table(eps)
    assert table["won"].tolist() == [True, False, False]
    assert table["invalid end"].tolist() == [False, True, False]
    assert table["action tokens"].tolist() == [6, 3, 9]
    stats = viewer.episode_stats(eps)
    assert stats.loc["turns", "mean"] == pytest.approx(2.0) and stats.loc["won", "max"] == 1.0
    assert stats["episodes"].iloc[0] == 3


def test_datum_views_mark_action_tokens():
    prompt = get_template("qwen3_game").render("Guess.", TOKENIZER)
    action = TOKENIZER.encode("\\boxed{5}") + [TOKENIZER.eos_token_id]
    datum = policy_gradient_datum(prompt, action, [-0.5] * len(action), advantage=1.3)
    table = viewer.datum_table(datum, TOKENIZER)
    assert len(table) == len(prompt) + len(action) - 1
    assert table["trained"].sum() == len(action) and table["advantage"].iloc[-1] == pytest.approx(1.3)
    html = str(viewer.datum_html(datum, TOKENIZER))
    assert html.count("opacity:0.35") == len(prompt) - 1
    for tok in (TOKENIZER, None):
        fig = viewer.plot_datum(datum, tok)
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_title(loc="left")
        labels = [t.get_text() for t in fig.axes[1].get_yticklabels()]
        assert fig.axes[1].get_ylabel() and len(labels) == len(action) + 8  # 8 prompt positions of context
        assert all(len(label) <= 34 for label in labels)  # whole-sentence tokens are cut, not drawn
        assert all(t.get_rotation() == 0 for t in fig.axes[1].get_yticklabels())
    assert labels[-1] == str(len(prompt) + len(action) - 2)
    named = [t.get_text() for t in viewer.plot_datum(datum, TOKENIZER).axes[1].get_yticklabels()]
    assert named[-1].endswith("<|im_end|>") and any(label.endswith("\\boxed{") for label in named)


def test_live_metrics_figure_has_labels():
    live = viewer.LiveMetrics(["sampler/success_rate", "train/loss:sum"])
    live.rows = [{"step": 0, "sampler/success_rate": 0.1, "train/loss:sum": 1.0}, {"step": 1, "sampler/success_rate": 0.3, "train/loss:sum": 0.5}]
    fig = live.figure()
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()


def test_metrics_table_indexes_by_step():
    table = viewer.metrics_table([{"step": 0.0, "a": 1.0, "b": 2.0}, {"step": 1.0, "a": 3.0, "b": 4.0}], ["a"])
    assert list(table.index) == [0, 1] and list(table.columns) == ["a"]
    readable = viewer.metrics_table([{"step": 0.0, "time/step": 1.0}], readable=True)
    assert list(readable.columns) == ["wall time per step (s)"]  # words that wrap, not a 20-character key


def test_live_metrics_skips_redraws_it_cannot_afford_but_always_draws_the_last_step():
    drawn = []
    live = viewer.LiveMetrics(["sampler/success_rate"], total=4, budget=RedrawBudget(share=0.05))
    live._redraw = lambda: (drawn.append(len(live.rows)), live.budget.drawing().__enter__())  # no figure needed
    live.budget._next = float("inf")  # as after an expensive redraw: nothing is due until the end
    for step in range(4):
        live.update({"step": step, "sampler/success_rate": 0.5, "time/step": 2.0})
    assert drawn == [4]
    live.rows = live.rows[:2]
    assert "step 2/4, about 4 s left" in live.figure()._suptitle.get_text()  # median step time x steps left


def test_interactive_game_plays_on_enter_says_its_state_and_refuses_after_the_end():
    from gemlab.envs import make_envs

    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    game = viewer.InteractiveGame(env)
    assert "Guess The Number" in game.output.value and not game.done and game.status == "in progress"
    game.action_box.value = "\\boxed{5}"  # what pressing Enter sends (continuous_update=False)
    assert game.episode.num_turns == 1 and game.action_box.value == ""
    target = env.unwrapped.game_number
    if target != 5:  # a wrong guess: the game goes on, and says so
        assert game.status == "in progress" and ">in progress<" in game.message.value
        assert "lost" not in game.message.value and "in progress" in game.output.value
    game.play_button.click()  # Play with an empty box plays nothing
    assert game.episode.num_turns == 1
    game.play(f"\\boxed{{{target}}}")
    assert game.done and game.status == "won" and ">won<" in game.message.value and "Game over" in game.output.value
    game.play("\\boxed{3}")  # refused once over, with a visible message
    assert game.episode.num_turns == (2 if target != 5 else 1)
    assert "was not played" in game.message.value and "New game" in game.message.value
    game.new_button.click()
    assert game.episode.num_turns == 0 and not game.done and "was not played" not in game.message.value
    game.play("no number")  # a format error ends the game
    assert game.done and game.status == "ended by an invalid action"


def test_episode_in_progress_is_not_called_lost():
    unfinished = episode([0.0, 0.0])
    unfinished.transitions[-1].done = False
    assert "in progress" in str(viewer.episode_html(unfinished)) and "lost" not in str(viewer.episode_html(unfinished))
    assert ">lost<" in str(viewer.episode_html(episode([0.0, 0.0])))
