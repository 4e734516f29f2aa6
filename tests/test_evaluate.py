"""The evaluation set is fixed: the same games whatever the run, and the same result for the same weights."""

from __future__ import annotations

import asyncio
import io
import random
import statistics

from gemlab import Prompting, Trainer, make_config
from gemlab.envs import make_envs
from gemlab.evaluate import evaluate_async, evaluate_client, evaluate_trainer, random_play, reset_seeds
from gemlab.templates import get_template
from tinker_emulator import TINY, LocalServiceClient

ENV = "game:GuessTheNumber-v0-easy"


def _secrets(seed: int) -> list[int]:
    envs = make_envs(ENV, 6, seed=seed)
    for env, reset_seed in zip(envs, reset_seeds(6), strict=True):
        env.reset(seed=reset_seed)
    return [env.unwrapped.game_number for env in envs]


def test_the_games_do_not_depend_on_the_run_seed():
    first = _secrets(0)
    assert first == _secrets(7)  # another run's envs, the same games
    assert len(set(first)) > 1  # and not one game six times


def test_same_weights_same_result(tmp_path):
    service = LocalServiceClient(device="cpu", root=tmp_path)
    training = service.create_lora_training_client(base_model=TINY, rank=4, seed=0).result()
    sampler = training.save_weights_and_get_sampling_client().result()

    def run():
        return asyncio.run(
            evaluate_async(
                sampler,
                Prompting(training.get_tokenizer(), get_template("qwen3_game"), max_tokens=8),
                env_id=ENV,
                num_games=8,
            )
        )

    first, second = run(), run()
    assert first.wins == second.wins and first.returns == second.returns and len(first.wins) == 8
    low, high = first.interval95()
    assert 0 <= low <= first.success <= high <= 1


def test_a_trainer_plays_the_same_set_and_keeps_the_games(tmp_path):
    from tqdm import tqdm

    config = make_config("laptop", log_dir=str(tmp_path), run_name="eval", num_env=4, batch_size=8)
    trainer = Trainer(config, progress=False)
    with tqdm(total=6, file=io.StringIO()) as bar:
        result = evaluate_trainer(trainer, 6, progress=bar)
        assert bar.n == 6  # one tick a game
    sampler = trainer.training_client.save_weights_and_get_sampling_client().result()
    direct = asyncio.run(
        evaluate_async(
            sampler,
            Prompting(trainer.tokenizer, trainer.template, config.max_tokens),
            env_id=config.env_id,
            num_games=6,
        )
    )
    trainer.close()
    assert result.wins == direct.wins and result.returns == direct.returns
    assert [e.won for e in result.episodes] == result.wins and [e.env_index for e in result.episodes] == list(range(6))
    assert "episodes" not in result.to_dict()


def test_a_trainer_can_be_scored_greedily(tmp_path):
    config = make_config("laptop", log_dir=str(tmp_path), run_name="greedy", num_env=4, batch_size=8)
    with Trainer(config, progress=False) as trainer:
        greedy = evaluate_trainer(trainer, 6, temperature=0.0)
        sampled = evaluate_trainer(trainer, 6)
        sampler = trainer.training_client.save_weights_and_get_sampling_client().result()
        direct = asyncio.run(
            evaluate_async(
                sampler,
                Prompting(trainer.tokenizer, trainer.template, config.max_tokens, temperature=0.0),
                env_id=config.env_id,
                num_games=6,
            )
        )

    def actions(result):
        return [[t.act_tokens for t in e.transitions] for e in result.episodes]

    assert actions(greedy) == actions(direct) and greedy.wins == direct.wins
    assert actions(greedy) != actions(sampled)  # the config's temperature (1.0) is not what played


def test_a_trainer_evaluates_every_n_steps_on_its_evaluation_env(tmp_path):
    config = make_config(  # trains on 1-10, scored on 1-20: returns that tell the two sets (and weights) apart
        "laptop", log_dir=str(tmp_path), run_name="every", eval_env_id="game:GuessTheNumber-v0-1to20", eval_every=2,
        eval_games=6,
        max_steps=2, num_env=4, batch_size=8,
    )  # fmt: skip
    with Trainer(config, progress=False) as trainer:
        first, second = trainer.step(), trainer.step()
        direct = trainer.run_on_loop(
            evaluate_client(trainer.training_client, trainer.tokenizer, trainer.template, config)
        )  # played again
    # step 1 is not due; the base was scored before it
    assert "eval/success" not in first and "eval/base_success" in first
    assert second["eval/return"] == sum(direct.returns) / 6 and second["eval/success"] == direct.success
    assert (
        second["eval/success_low"] <= second["eval/success"] <= second["eval/success_high"] and second["time/eval"] > 0
    )
    assert all("between 1 and 20" in e.transitions[0].observation for e in direct.episodes)


def test_the_trainer_keeps_its_own_evaluation_of_the_current_weights(tmp_path):
    """Notebook 11 shows the score of the weights after its last step, which the Trainer has just
    made (``eval_every``): ``last_evaluation`` holds it until a step changes the weights."""
    config = make_config(
        "laptop",
        log_dir=str(tmp_path),
        run_name="own",
        eval_every=2,
        eval_games=6,
        max_steps=3,
        num_env=4,
        batch_size=8,
    )
    with Trainer(config, progress=False) as trainer:
        trainer.step()
        assert trainer.last_evaluation is None  # the base was scored, then the weights changed; step 1 is not due
        second = trainer.step()
        own = trainer.last_evaluation
        assert own is not None and own.success == second["eval/success"] and len(own.wins) == 6
        again = evaluate_trainer(trainer)  # the same weights and games, played again
        assert again is not own and again.wins == own.wins and again.returns == own.returns
        trainer.step()
        assert trainer.last_evaluation is None


def test_the_held_out_split_is_what_the_evaluation_plays(tmp_path):
    config = make_config(
        "laptop",
        log_dir=str(tmp_path),
        env_id="rg:sums-1digit-train",
        eval_env_id="rg:sums-1digit-test",
        template="qwen3_general",
    )
    with Trainer(config, progress=False) as trainer:
        result = evaluate_trainer(trainer, 64)
    assert sorted(e.transitions[0].observation.strip() for e in result.episodes) == sorted(
        i["question"] for i in _test_side()
    )


def test_a_failed_evaluation_is_a_warning_and_the_step_is_kept(tmp_path, monkeypatch):
    import pytest

    import gemlab.trainer

    async def broken(*args, **kwargs):
        raise RuntimeError("sampler gone")

    monkeypatch.setattr(gemlab.trainer, "evaluate_client", broken)
    config = make_config(
        "laptop", log_dir=str(tmp_path), run_name="broken", eval_every=1, max_steps=1, num_env=4, batch_size=8
    )
    with Trainer(config, progress=False) as trainer:
        with pytest.warns(UserWarning, match="the evaluation failed.*sampler gone") as caught:
            metrics = trainer.step()
        # the start's, before step 0
        assert any(str(w.message).startswith("the base evaluation failed") for w in caught)
        assert trainer.step_index == 1 and trainer.consistent and not any(key.startswith("eval/") for key in metrics)
    assert (tmp_path / "broken" / "metrics.jsonl").read_text().count("\n") == 1


def test_an_unknown_eval_env_is_refused_before_any_file(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="Unknown GEM env id 'rg:sums-1digit-tset'"):
        Trainer(make_config("laptop", log_dir=str(tmp_path), eval_env_id="rg:sums-1digit-tset"), progress=False)
    assert list(tmp_path.iterdir()) == []


def _test_side() -> list[dict]:
    import gem

    return gem.make("rg:sums-1digit-test", seed=0, use_mp=False).items


def test_random_play_scores_chance_on_the_fixed_games_and_leaves_the_global_random_alone():
    """GEM's random player guesses 1-10 uniformly, repeats allowed, 4 times: it wins with
    probability 1 - 0.9 ** 4 = 0.344, whatever the secret numbers."""
    before = random.getstate()
    rates = random_play("game:GuessTheNumber-v0-easy", repeats=100)
    assert random.getstate() == before
    assert len(rates) == 100 and abs(statistics.mean(rates) - (1 - 0.9**4)) < 0.02
    assert random_play("game:GuessTheNumber-v0-easy", repeats=3) == rates[:3]  # the same guesses each time
