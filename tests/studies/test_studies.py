"""The reproduction studies: their runs, GRPO's groups, PPO-style minibatches, the resumable
runner, and reruns from a saved config.json."""

import asyncio
import json

import chz
import numpy as np
import pytest

from gemlab import make_config
from gemlab.envs import make_envs
from gemlab.episodes import Episode, RolloutBatch, Transition, collect_batch
from gemlab.step import prepare_transitions
from gemlab.studies.definitions import study_configs
from gemlab.studies.figures import group_runs, summary_table
from gemlab.studies.runner import run_configs
from gemlab.studies.variants import GUESS_20, PRODUCTS_1DIGIT
from gemlab.trainer import Trainer
from tests.helpers.scripted import TEMPLATE, TOKENIZER, ScriptedSampler

TINY = dict(batch_size=8, num_env=4, max_steps=2)


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _untimed(rows):
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def test_study_configs_cover_the_issue():
    gamma = study_configs("gamma", "/x")
    assert sorted({c.gamma for c in gamma}) == [0.5, 0.9, 1.0] and len(gamma) == 9
    assert {c.env_id for c in gamma} == {GUESS_20} and {c.log_dir for c in gamma} == {"/x/gamma"}
    algorithms = {c.run_name: c for c in study_configs("algorithms", "/x", seeds=[0])}
    assert len(algorithms) == 8
    assert {algorithms["guess-grpo-seed0"].gamma, algorithms["products-grpo-seed0"].group_size} == {1.0, 8}
    assert algorithms["products-ppo-seed0"].loss_fn == "ppo" and algorithms["guess-ppo-seed0"].num_minibatches == 4
    assert algorithms["guess-reinforce-seed0"].advantage == "none"
    assert algorithms["products-rebn-seed0"].env_id == PRODUCTS_1DIGIT
    # no method gets more data or a different learning rate than another
    assert len({(c.batch_size, c.learning_rate, c.max_steps, c.lora_rank) for c in algorithms.values()}) == 1
    with pytest.raises(ValueError, match="Known studies: gamma, algorithms"):
        study_configs("lambda")


def test_grouped_envs_play_one_problem_per_group():
    envs = make_envs("game:GuessTheNumber-v0-easy", 8, seed=3, group_size=4)
    sampler = ScriptedSampler([11])  # out of range: every game runs to its 4th turn
    batch = asyncio.run(
        collect_batch(sampler, envs, tokenizer=TOKENIZER, template=TEMPLATE, min_transitions=64, max_tokens=8, seed=5, group_size=4)
    )
    assert [e.group for e in batch.episodes] == [(r, g) for r in range(2) for g in (0, 0, 0, 0, 1, 1, 1, 1)]
    assert len({env.unwrapped.game_number for env in envs[:4]}) == 1
    products = make_envs(PRODUCTS_1DIGIT, 6, seed=1, group_size=3)
    questions = [env.reset(seed=7 + i // 3)[0] for i, env in enumerate(products)]
    assert questions[0] == questions[1] == questions[2] and questions[3] == questions[4] == questions[5]
    with pytest.raises(ValueError, match="group_size must divide num_env"):
        make_config("laptop", num_env=6, group_size=4)
    with pytest.raises(ValueError, match="set group_size >= 2"):
        make_config("laptop", advantage="grpo")


def _episode(rewards, group):
    transitions = [Transition([1], [2], [-0.1], r, i == len(rewards) - 1) for i, r in enumerate(rewards)]
    return Episode(transitions=transitions, group=group)


def test_grpo_gives_every_turn_its_episode_score_within_its_group():
    batch = RolloutBatch([_episode([0, 0, 1], "a"), _episode([0.5], "a"), _episode([0, 1], "b"), _episode([1], "b")])
    _, advantages = prepare_transitions(batch, gamma=0.5, advantage="grpo", batch_size=100, rng=np.random.default_rng(0))
    # group a: totals 1 and 0.5 -> +-1/sqrt(2) (mean 0.75, sample std 0.3536); group b: equal -> 0
    assert advantages == pytest.approx([2**-0.5] * 3 + [-(2**-0.5)] + [0.0] * 3, abs=1e-6)


def test_ppo_style_step_makes_one_update_per_minibatch(tmp_path):
    config = make_config("laptop", **TINY, loss_fn="ppo", num_minibatches=4, log_dir=str(tmp_path))
    trainer = Trainer(config, progress=False)
    calls = []
    original = trainer.training_client.forward_backward_async

    async def counting(datums, *args, **kwargs):
        calls.append(len(datums))
        return await original(datums, *args, **kwargs)

    trainer.training_client.forward_backward_async = counting
    metrics = trainer.step()
    trainer.close()
    assert calls == [2, 2, 2, 2]
    # later minibatches are scored by weights already moved by earlier ones
    assert metrics["train/kl_sample_train_v2"] > 0


def test_runner_resumes_an_interrupted_run_and_skips_finished_ones(tmp_path):
    config = make_config("laptop", **dict(TINY, max_steps=4), save_every=2, log_dir=str(tmp_path / "a"), run_name="r")
    straight = chz.replace(config, log_dir=str(tmp_path / "b"))
    run_configs([straight], progress=False)
    trainer = Trainer(config, progress=False)  # "interrupted" after 3 steps, checkpoint at step 2
    for _ in range(3):
        trainer.step()
    trainer.close()
    run_configs([config], progress=False)
    run_dir = tmp_path / "a" / "r"
    assert sorted(p.name for p in run_dir.iterdir() if not p.name.startswith(".")) == ["config.json", "metrics.jsonl"]
    rows = _rows(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert _untimed(rows) == _untimed(_rows(tmp_path / "b" / "r" / "metrics.jsonl"))
    before = (run_dir / "metrics.jsonl").stat().st_mtime_ns
    run_configs([config], progress=False)  # finished: nothing runs, nothing is rewritten
    assert (run_dir / "metrics.jsonl").stat().st_mtime_ns == before


def test_summary_table_averages_windows_over_seeds(tmp_path):
    for seed, successes in enumerate(([0.0, 0.2, 0.6, 1.0], [0.2, 0.2, 0.4, 0.6], [0.5, 0.5])):  # seed 2 unfinished
        run = tmp_path / f"rebn-seed{seed}"
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"max_steps": 4}))
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "sampler/success_rate": s}) + "\n" for i, s in enumerate(successes)))
    assert sorted(group_runs({"rebn-seed0": 1, "rebn-seed1": 2, "none-seed0": 3})) == ["none", "rebn"]
    table = summary_table(tmp_path, window=2)
    row = table.loc["rebn"]
    assert row["seeds"] == 2
    assert row["success_rate first"] == pytest.approx(0.15)  # (0.1 + 0.2) / 2
    assert row["success_rate last"] == pytest.approx(0.65)  # (0.8 + 0.5) / 2
    assert row["success_rate last std"] == pytest.approx(0.15)
    assert row["success_rate gain"] == pytest.approx(0.5)


def test_a_study_run_reruns_from_its_config_json_with_the_same_metrics(tmp_path):
    from gemlab.train import main

    config = chz.replace(study_configs("algorithms", tmp_path / "data", steps=2, seeds=[0])[2], batch_size=16, num_env=8)
    assert config.advantage == "grpo"  # grouped envs and per-episode advantages, the most state to replay
    run_configs([config], progress=False)
    saved = tmp_path / "data" / "algorithms" / config.run_name
    assert main([f"config={saved / 'config.json'}", f"log_dir={tmp_path / 'again'}"]) == 0
    again = _rows(tmp_path / "again" / config.run_name / "metrics.jsonl")
    assert _untimed(again) == _untimed(_rows(saved / "metrics.jsonl"))
    assert main([f"config={tmp_path / 'missing.json'}"]) == 2
