"""Playing a game by hand: Enter plays, the state is said, playing after the end is refused."""

from gemlab.envs import make_envs
from gemlab.notebook import game_widget


def test_interactive_game_plays_on_enter_says_its_state_and_refuses_after_the_end():
    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    game = game_widget.InteractiveGame(env)
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
