"""Play a GEM text game by hand in a notebook: an action box, the game's newest words, and the
episode so far in the episode viewer."""

from __future__ import annotations

from html import escape
from typing import Any

from gemlab.episodes import Episode, play_turn
from gemlab.notebook.episode_views import TEXT_STYLE, episode_html, new_text, outcome


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
        controls = widgets.HBox(
            [self.action_box, self.play_button, self.new_button], layout=widgets.Layout(flex_flow="row wrap")
        )
        self.widget = widgets.VBox([controls, self.message, self.output])
        self.new_game()

    @property
    def status(self) -> str:
        """"in progress", "won", "lost" or "ended by an invalid action"."""
        return outcome(self.episode)[0] if self.episode.transitions else "in progress"

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
            self._draw(
                f"The game is over ({self.status}): <b>{escape(action)}</b> was not played. Press <b>New "
                "game</b> to play again."
            )
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
        status, color = outcome(self.episode) if self.episode.transitions else ("in progress", "#1565c0")
        self.message.value = (
            f'<div style="text-align:left">Game <b style="color:{color}">{status}</b> after '
            f'{self.episode.num_turns} turn(s)'
            + (f' — <span style="color:#c62828">{message}</span>' if message else "")
            + "</div>"
        )
        if self.done:
            # what the final observation adds, without the prompt for a guess that will never come
            added = new_text(self.episode.transitions[-1].observation, self.observation)[1]
            last = " ".join(line for line in added.splitlines() if line.strip() and not line.startswith("Enter your"))
            status_html = (
                '<div style="margin-top:6px; text-align:left"><b>Game over.</b> The game\'s last words: '
                f'<i>{escape(last)}</i> Press <b>New game</b> to play again.</div>'
            )
        else:  # only what the game just said (the history repeats below), right under the action box
            said = (
                new_text(self.episode.transitions[-1].observation, self.observation)[1]
                if self.episode.transitions
                else self.observation
            )
            status_html = (
                f'<div style="margin-top:6px; text-align:left">The game says:</div><pre style="{TEXT_STYLE} '
                f'background:#f3f3f3; color:#111">{escape(said.strip())}</pre>'
            )
        history = (
            episode_html(self.episode, gamma=self.gamma, title="Your game so far").source
            if self.episode.transitions
            else ""
        )
        self.output.value = status_html + history  # the newest first: no scrolling down to read the hint

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
