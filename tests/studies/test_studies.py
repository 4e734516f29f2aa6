"""The reproduction studies: their runs and contrasts, GRPO's groups, PPO-style minibatches, the
resumable runner with its evaluations, the tables, and reruns from a saved config.json."""

import asyncio
import json
from pathlib import Path

import chz
import numpy as np
import pytest

import gemlab.evaluate
from gemlab import make_config
from gemlab.doctor import cpu_name
from gemlab.env_ids import (
    GUESS_20,
    GUESS_20_IN_7,
    GUESS_EASY,
    PRODUCTS_1DIGIT,
    PRODUCTS_NO_TOOL_TEST,
    PRODUCTS_NO_TOOL_TRAIN,
    PRODUCTS_TRAIN,
    SUMS_1DIGIT,
    SUMS_TEST,
    SUMS_TRAIN,
)
from gemlab.envs import make_envs
from gemlab.episodes import Episode, Prompting, RolloutBatch, Transition, collect_batch
from gemlab.step import prepare_transitions
from gemlab.studies import evaluation
from gemlab.studies.definitions import (
    CONTRASTS,
    LEARNING_RATES,
    SMOLLM2_GAMMA_SEEDS,
    SMOLLM2_LEARNING_RATES,
    SMOLLM2_SEEDS,
    TUNING_SEEDS,
    Run,
    study_runs,
)
from gemlab.studies.evaluation import read_evaluations
from gemlab.studies.figures import (
    FIGURES,
    best_learning_rates,
    contrast_table,
    group_runs,
    guess_sequences,
    outcome_table,
    smollm2_figure,
)
from gemlab.studies.runner import estimate_seconds, read_timings, run_studies
from gemlab.tiny.registry import TINY_SUMS
from gemlab.trainer import Trainer
from tests.helpers.scripted import TEMPLATE, TOKENIZER, ScriptedSampler

TINY = dict(batch_size=8, num_env=4, max_steps=2)


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _untimed(rows):
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows]


def test_study_runs_cover_the_issue():
    gamma = [run.config for run in study_runs("gamma", "/x")]
    assert sorted({c.gamma for c in gamma}) == [0.5, 0.9, 1.0] and len(gamma) == 30  # 10 seeds per arm
    assert (
        {c.env_id for c in gamma} == {GUESS_20}
        and {c.log_dir for c in gamma} == {"/x/gamma"}
        and {c.max_steps for c in gamma} == {150}
    )
    tuning = [run.config for run in study_runs("tuning", "/x", environments=["guess"])]
    assert {c.seed for c in tuning} == set(TUNING_SEEDS) and len({c.learning_rate for c in tuning}) >= 3
    assert not set(TUNING_SEEDS) & {c.seed for c in gamma}  # rates are chosen on seeds the comparison never sees
    rates = {
        f"{env}-{m}": lr
        for env in ("guess", "guess20", "products", "sums")
        for m, lr in zip(("reinforce", "rebn", "grpo", "ppo"), (1e-3, 2e-3, 4e-3, 1e-3), strict=True)
    }
    algorithms = {run.name: run.config for run in study_runs("algorithms", "/x", seeds=[0], learning_rates=rates)}
    assert len(algorithms) == 16  # two multi-turn games and two single-turn tasks, four methods
    assert {algorithms["guess-grpo-seed0"].gamma, algorithms["products-grpo-seed0"].group_size} == {1.0, 8}
    assert algorithms["products-ppo-seed0"].loss_fn == "ppo" and algorithms["guess-ppo-seed0"].num_minibatches == 4
    assert (
        algorithms["guess-reinforce-seed0"].advantage == "none"
        and algorithms["guess-reinforce-seed0"].learning_rate == 1e-3
    )
    assert (
        algorithms["products-rebn-seed0"].env_id == PRODUCTS_1DIGIT
        and algorithms["sums-rebn-seed0"].env_id == SUMS_1DIGIT
    )
    # no method gets more data than another
    assert len({(c.batch_size, c.max_steps, c.lora_rank) for c in algorithms.values()}) == 1
    with pytest.raises(ValueError, match="Known studies: gamma, tuning, algorithms"):
        study_runs("lambda")
    with pytest.raises(ValueError, match="run the tuning study first"):
        study_runs("algorithms")
    with pytest.raises(ValueError, match="no tuned learning rate for guess-reinforce"):
        study_runs("algorithms", learning_rates={}, environments=["guess"])
    # the analysis plan: both gamma contrasts on both turn metrics, ReBN against each baseline
    assert {c.name for c in CONTRASTS["gamma"]} >= {
        "gamma0.5 - gamma1.0: turns_per_won_game",
        "gamma0.9 - gamma1.0: turns_per_game",
    }
    assert {c.control for c in CONTRASTS["algorithms"] if c.treatment == "guess-rebn"} == {
        "guess-reinforce",
        "guess-grpo",
        "guess-ppo",
    }


def test_the_smollm2_study_pairs_three_advantages_on_the_preset_and_scores_held_out_sums():
    runs = study_runs("smollm2", "/x")
    # the issue: at least 5 paired seeds per method
    assert len(runs) == 3 * len(SMOLLM2_SEEDS) and len(SMOLLM2_SEEDS) >= 5
    by_name = {run.name: run for run in runs}
    assert {by_name[f"smollm2-{m}-seed0"].config.advantage for m in ("grpo", "rebn", "reinforce")} == {
        "grpo",
        "rebn",
        "none",
    }
    preset = make_config("smollm2")
    for seed in SMOLLM2_SEEDS:  # a seed's three runs differ in the advantage and nothing else
        configs = [by_name[f"smollm2-{m}-seed{seed}"].config for m in ("grpo", "rebn", "reinforce")]
        fields = [{k: v for k, v in chz.asdict(c).items() if k not in ("advantage", "run_name")} for c in configs]
        assert fields[0] == fields[1] == fields[2] and configs[0].seed == seed
    config = runs[0].config
    assert (config.model_name, config.env_id, config.learning_rate, config.group_size, config.warmup_data) == (
        preset.model_name, SUMS_TRAIN, preset.learning_rate, preset.group_size, "own_answers")
    # scored by the runner on every held-out sum in both modes; the Trainer's own evaluation is off
    assert (config.eval_env_id, runs[0].eval_games, config.eval_every, config.log_dir) == (
        SUMS_TEST,
        64,
        0,
        "/x/smollm2",
    )
    assert {c.name for c in CONTRASTS["smollm2"]} == {
        "smollm2-rebn - smollm2-grpo: success",
        "smollm2-reinforce - smollm2-grpo: success",
    }


def test_the_smollm2_gamma_study_pairs_three_discounts_on_two_games():
    runs = study_runs("smollm2-gamma", "/x")
    # issue 56: at least 8 paired seeds per discount, gamma 0.5 / 0.9 / 1.0, on the easy game and on 1-20
    assert len(runs) == 2 * 3 * len(SMOLLM2_GAMMA_SEEDS) and len(SMOLLM2_GAMMA_SEEDS) >= 8
    by_name = {run.name: run for run in runs}
    preset = make_config("smollm2-guess")
    for game, env_id in (("easy", GUESS_EASY), ("1to20", GUESS_20_IN_7)):
        for seed in SMOLLM2_GAMMA_SEEDS:  # a seed's three runs on a game differ in gamma and nothing else
            configs = [by_name[f"smollm2-{game}-gamma{g}-seed{seed}"].config for g in (0.5, 0.9, 1.0)]
            assert [c.gamma for c in configs] == [0.5, 0.9, 1.0]
            fields = [{k: v for k, v in chz.asdict(c).items() if k not in ("gamma", "run_name")} for c in configs]
            assert fields[0] == fields[1] == fields[2] and configs[0].seed == seed
            assert (configs[0].env_id, configs[0].eval_env_id) == (env_id, env_id)
    config = runs[0].config
    # the preset's model, batch of 128 transitions and groups; a fixed step count (no time limit), so
    # every arm of a seed makes the same number of updates
    assert (config.model_name, config.batch_size, config.group_size) == (preset.model_name, 128, preset.group_size)
    # the arms differ in gamma only if the advantage reads it: per-turn returns (ReBN), not GRPO's totals
    batch = RolloutBatch([_episode([0, 0, 1], "a"), _episode([0, 1], "a"), _episode([0, 0, 0, 1], "b")])
    by_gamma = [
        prepare_transitions(batch, gamma=g, advantage=config.advantage, batch_size=100, rng=np.random.default_rng(0))[1]
        for g in (0.5, 1.0)
    ]
    assert config.advantage == "rebn" and by_gamma[0] != pytest.approx(by_gamma[1])
    assert (config.max_minutes, config.max_steps, config.eval_every, runs[0].eval_games) == (None, 16, 0, 64)
    assert {c.name for c in CONTRASTS["smollm2-gamma"]} == {
        f"smollm2-{game}-gamma{g} - smollm2-{game}-gamma1.0: {metric}"
        for game in ("easy", "1to20")
        for g in (0.5, 0.9)
        for metric in ("turns_per_won_game", "success")
    }
    assert {c.metric: c.lower_is_better for c in CONTRASTS["smollm2-gamma"]} == {
        "turns_per_won_game": True,
        "success": False,
    }


def test_the_smollm2_tool_use_study_pairs_the_tool_preset_with_the_same_products_without_the_tool():
    runs = study_runs("smollm2-tool-use", "/x")
    assert len(runs) == 2 * len(SMOLLM2_GAMMA_SEEDS) and len(SMOLLM2_GAMMA_SEEDS) >= 8  # issue 56: 8 paired seeds
    by_name = {run.name: run.config for run in runs}
    preset = make_config("smollm2-tool")
    for seed in SMOLLM2_GAMMA_SEEDS:
        tool, no_tool = by_name[f"smollm2-tool-seed{seed}"], by_name[f"smollm2-no-tool-seed{seed}"]
        assert (tool.env_wrappers, tool.warmup_data, tool.env_id) == (preset.env_wrappers, "own_code", PRODUCTS_TRAIN)
        assert (no_tool.env_wrappers, no_tool.warmup_data) == ("", "own_answers")
        assert (no_tool.env_id, no_tool.eval_env_id) == (PRODUCTS_NO_TOOL_TRAIN, PRODUCTS_NO_TOOL_TEST)
        # the same episodes a step: the tool's 128 transitions are 64 two-turn episodes, no tool's 64 one-turn ones
        assert (tool.batch_size, no_tool.batch_size) == (128, 64)
        differ = {"env_id", "eval_env_id", "env_wrappers", "warmup_data", "batch_size", "run_name"}
        same = [{k: v for k, v in chz.asdict(c).items() if k not in differ} for c in (tool, no_tool)]
        assert same[0] == same[1] and tool.seed == seed
        assert (tool.max_minutes, tool.max_steps, tool.eval_every) == (None, 8, 0)  # arms pair by update count
    assert [c.name for c in CONTRASTS["smollm2-tool-use"]] == ["smollm2-tool - smollm2-no-tool: success"]


def test_the_smollm2_algorithms_study_tunes_each_advantage_on_its_own_seeds_then_pairs_them_on_the_game():
    preset = make_config("smollm2-guess")
    sweep = study_runs("smollm2-tuning", "/x")
    assert len(sweep) == 3 * len(SMOLLM2_LEARNING_RATES) * len(TUNING_SEEDS)
    assert not set(TUNING_SEEDS) & set(SMOLLM2_GAMMA_SEEDS)  # rates are chosen on seeds kept out of the comparison
    assert {(r.config.advantage, r.config.learning_rate) for r in sweep} == {
        (advantage, lr) for advantage in ("grpo", "rebn", "none") for lr in SMOLLM2_LEARNING_RATES
    }
    assert "smollm2-game-rebn-lr0.00025-seed100" in {r.name for r in sweep}
    with pytest.raises(ValueError, match="run the smollm2-tuning study first"):
        study_runs("smollm2-algorithms", "/x")
    with pytest.raises(ValueError, match="for smollm2-game-grpo, smollm2-game-reinforce: finish the smollm2-tuning"):
        study_runs("smollm2-algorithms", "/x", learning_rates={"smollm2-game-rebn": 1e-3})
    rates = {"smollm2-game-grpo": 5e-4, "smollm2-game-rebn": 1e-3, "smollm2-game-reinforce": 2.5e-4}
    runs = study_runs("smollm2-algorithms", "/x", learning_rates=rates)
    assert len(runs) == 3 * len(SMOLLM2_GAMMA_SEEDS) and len(SMOLLM2_GAMMA_SEEDS) >= 8  # issue 56: 8 paired seeds
    by_name = {run.name: run.config for run in runs}
    for seed in SMOLLM2_GAMMA_SEEDS:  # a seed's runs differ in the advantage and its rate, nothing else
        configs = {arm: by_name[f"{arm}-seed{seed}"] for arm in rates}
        assert {arm: (c.advantage, c.learning_rate) for arm, c in configs.items()} == {
            "smollm2-game-grpo": ("grpo", 5e-4),
            "smollm2-game-rebn": ("rebn", 1e-3),
            "smollm2-game-reinforce": ("none", 2.5e-4),
        }
        differ = {"advantage", "learning_rate", "run_name"}
        same = [{k: v for k, v in chz.asdict(c).items() if k not in differ} for c in configs.values()]
        assert same[0] == same[1] == same[2] and same[0]["seed"] == seed
    config = runs[0].config  # the preset's game, batch, groups and gamma; a fixed step count
    assert (config.env_id, config.eval_env_id, config.model_name) == (GUESS_EASY, GUESS_EASY, preset.model_name)
    assert (config.batch_size, config.group_size, config.gamma) == (128, preset.group_size, preset.gamma)
    assert (config.max_minutes, config.max_steps, config.eval_every, runs[0].eval_games) == (None, 16, 0, 64)
    assert [c.name for c in CONTRASTS["smollm2-algorithms"]] == [
        "smollm2-game-rebn - smollm2-game-reinforce: success",
        "smollm2-game-rebn - smollm2-game-grpo: success",
    ]


def test_the_smollm2_sweep_picks_each_advantages_rate_and_draws_it(tmp_path):
    root = tmp_path / "smollm2-tuning"
    best = {"grpo": 5e-4, "rebn": 1e-3}
    for seed in TUNING_SEEDS:
        for method, lr_best in best.items():
            for lr in SMOLLM2_LEARNING_RATES:
                won = 0.8 if lr == lr_best else 0.4 + seed / 1000
                _fake_run(root, f"smollm2-game-{method}-lr{lr:g}", seed, [0.0] * 3, evaluation=won)
    _fake_run(root, "smollm2-game-reinforce-lr0.001", 100, [0.0] * 3, evaluation=1.0)  # its sweep is unfinished
    assert best_learning_rates(root, "smollm2-tuning") == {"smollm2-game-grpo": 5e-4, "smollm2-game-rebn": 1e-3}
    with pytest.raises(FileNotFoundError, match="run `--study smollm2-tuning` first"):
        best_learning_rates(tmp_path / "missing", "smollm2-tuning")
    (ax,) = FIGURES["smollm2-tuning"](root).axes
    lines = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
    assert lines["REINFORCE + ReBN"] == pytest.approx([0.5005, 0.5005, 0.8])  # per rate, mean over seeds 100, 101
    assert sorted(lines) == ["GRPO (groups of 16, the preset)", "REINFORCE (raw returns)", "REINFORCE + ReBN"]


def test_the_1_to_20_game_in_7_turns_is_gems_game_with_those_bounds():
    env = make_envs(GUESS_20_IN_7, 1, seed=0)[0]
    assert (env.min_number, env.max_number, env.max_turns) == (1, 20, 7)


def test_the_smollm2_gamma_figure_draws_each_game_with_its_bisection_line(tmp_path):
    root = tmp_path / "smollm2-gamma"
    row = {"sampler/success_rate": 0.3, "sampler/num_turns_per_won_episode": 3.0}
    for seed in range(2):
        for game in ("easy", "1to20"):
            for gamma in (0.5, 1.0):
                _fake_run(root, f"smollm2-{game}-gamma{gamma}", seed, [0.3] * 4)
                (root / f"smollm2-{game}-gamma{gamma}-seed{seed}" / "metrics.jsonl").write_text(
                    "".join(json.dumps({"step": i, **row}) + "\n" for i in range(4))
                )
    figure = FIGURES["smollm2-gamma"](root)
    easy, hard = figure.subfigs
    assert easy.get_suptitle().startswith("SmolLM2-135M-Instruct on GuessTheNumber 1-10 (4 turns)")
    assert hard.get_suptitle().startswith("SmolLM2-135M-Instruct on GuessTheNumber 1-20 (7 turns)")
    # bisection wins every game of 1-10 in 4 turns in 2.9 turns on average (29 over the 10 numbers); of 1-20 in 3.7
    assert "binary search: 2.90" in {line.get_label() for line in easy.axes[1].get_lines()}
    assert "binary search: 3.70" in {line.get_label() for line in hard.axes[1].get_lines()}
    legend = [t.get_text() for t in easy.axes[0].get_legend().get_texts()]
    assert legend == ["smollm2-easy-gamma0.5 (n=2)", "smollm2-easy-gamma1.0 (n=2)"]  # each game's own arms only


def test_a_study_evaluation_plays_the_runs_held_out_env(tmp_path, monkeypatch):
    played = []
    real = gemlab.evaluate.evaluate_async

    async def recording(*args, **kwargs):
        played.append((kwargs["env_id"], kwargs["num_games"]))
        return await real(*args, **kwargs)

    monkeypatch.setattr(gemlab.evaluate, "evaluate_async", recording)
    config = make_config(
        "laptop",
        **TINY,
        model_name=TINY_SUMS,
        env_id=SUMS_TRAIN,
        eval_env_id=SUMS_TEST,
        template="qwen3_general",
        log_dir=str(tmp_path),
    )
    trainer = Trainer(config, progress=False)
    saves = []
    save = trainer.training_client.save_weights_and_get_sampling_client

    async def counted():
        saves.append(1)
        return await save()

    monkeypatch.setattr(trainer.training_client, "save_weights_and_get_sampling_client", counted)
    try:
        rows = evaluation.evaluate_trainer(trainer, 3)
    finally:
        trainer.close()
    assert played == [(SUMS_TEST, 3), (SUMS_TEST, 3)]  # sampled, then greedy: never the training side
    assert len(saves) == 1  # the weights are saved once for both modes
    assert [(row["mode"], row["num_games"]) for row in rows] == [("sampled", 3), ("greedy", 3)]


def test_grouped_envs_play_one_problem_per_group():
    envs = make_envs("game:GuessTheNumber-v0-easy", 8, seed=3, group_size=4)
    sampler = ScriptedSampler([11])  # out of range: every game runs to its 4th turn
    batch = asyncio.run(
        collect_batch(
            sampler, envs, Prompting(TOKENIZER, TEMPLATE, max_tokens=8), min_transitions=64, seed=5, group_size=4
        )
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
    _, advantages = prepare_transitions(
        batch, gamma=0.5, advantage="grpo", batch_size=100, rng=np.random.default_rng(0)
    )
    # group a: totals 1 and 0.5 -> +-1/sqrt(2) (mean 0.75, sample std 0.3536); group b: equal -> 0
    assert advantages == pytest.approx([2**-0.5] * 3 + [-(2**-0.5)] + [0.0] * 3, abs=1e-6)


def test_ppo_style_step_makes_one_update_per_minibatch(tmp_path):
    config = make_config("laptop", **TINY, loss_fn="ppo", num_minibatches=4, log_dir=str(tmp_path))
    trainer = Trainer(config, progress=False)
    calls = []
    original = trainer.training_client.forward_backward

    def counting(datums, *args, **kwargs):
        calls.append(len(datums))
        return original(datums, *args, **kwargs)

    trainer.training_client.forward_backward = counting
    metrics = trainer.step()
    trainer.close()
    assert calls == [2, 2, 2, 2]
    # later minibatches are scored by weights already moved by earlier ones
    assert metrics["train/kl_sample_train_v2"] > 0


def _tiny_run(tmp_path, folder, **fields):
    config = make_config(
        "laptop", **dict(TINY, max_steps=4), save_every=2, log_dir=str(tmp_path / folder), run_name="r-seed0", **fields
    )
    return Run(config, eval_every=2, eval_games=2)


def test_runner_resumes_an_interrupted_run_and_skips_finished_ones(tmp_path):
    run, straight = _tiny_run(tmp_path, "a"), _tiny_run(tmp_path, "b")
    run_studies([straight], progress=False)
    trainer = Trainer(run.config, progress=False)  # "interrupted" after 3 steps, checkpoint at step 2
    for _ in range(3):
        trainer.step()
    trainer.close()
    run_studies([run], progress=False)
    run_dir = tmp_path / "a" / "r-seed0"
    assert sorted(p.name for p in run_dir.iterdir() if not p.name.startswith(".")) == [
        "config.json",
        "eval.jsonl",
        "metrics.jsonl",
    ]
    rows = _rows(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [0, 1, 2, 3]
    assert _untimed(rows) == _untimed(_rows(tmp_path / "b" / "r-seed0" / "metrics.jsonl"))
    # the fixed set is evaluated at steps 2 and 4, sampled and greedy, the same after the resume
    evaluations = read_evaluations(run_dir)
    assert [(row["step"], row["mode"]) for row in evaluations] == [
        (2, "sampled"),
        (2, "greedy"),
        (4, "sampled"),
        (4, "greedy"),
    ]
    assert evaluations == read_evaluations(tmp_path / "b" / "r-seed0")
    assert all(len(row["actions"]) == 2 and all(isinstance(a, str) for a in row["actions"]) for row in evaluations)
    sequences = guess_sequences(tmp_path / "a", "r-seed0")  # the greedy games of the last evaluation, read back
    assert len(sequences) == 2 and all(line.split(": ")[0].isdigit() for line in sequences)
    before = (run_dir / "metrics.jsonl").stat().st_mtime_ns
    run_studies([run], progress=False)  # finished: nothing runs, nothing is rewritten
    assert (run_dir / "metrics.jsonl").stat().st_mtime_ns == before
    assert estimate_seconds([run], [tmp_path / "b"]) == (0.0, [])  # nothing left to do
    # the same folder asked for with another schedule: refused, never started again from nothing
    with pytest.raises(ValueError, match="another schedule .*no evaluation at step 3"):
        run_studies([Run(chz.replace(run.config, max_steps=3), eval_every=3, eval_games=2)], progress=False)
    assert (run_dir / "metrics.jsonl").stat().st_mtime_ns == before


def test_a_finished_run_without_its_last_evaluation_is_evaluated_on_resume(tmp_path):
    run = _tiny_run(tmp_path, "a")
    trainer = Trainer(run.config, progress=False)
    for _ in range(4):
        trainer.step()
    trainer.save_checkpoint()  # killed after the last step, before its evaluation
    trainer.close()
    seconds, unknown = estimate_seconds([run], [tmp_path / "nowhere"])
    assert unknown == ["r"]
    run_studies([run], progress=False)
    assert [row["step"] for row in read_evaluations(tmp_path / "a" / "r-seed0")] == [4, 4]  # step 2 passed unevaluated
    assert len(_rows(tmp_path / "a" / "r-seed0" / "metrics.jsonl")) == 4


def test_worker_processes_give_the_same_runs_as_one_process(tmp_path):
    runs = [_tiny_run(tmp_path, "one", gamma=g) for g in (0.5, 1.0)]
    runs = [Run(chz.replace(r.config, run_name=f"g{r.config.gamma}-seed0"), eval_every=4, eval_games=2) for r in runs]
    parallel = [Run(chz.replace(r.config, log_dir=str(tmp_path / "two")), 4, 2) for r in runs]
    run_studies(runs, progress=False)
    timings = run_studies(parallel, jobs=2, progress=False)
    assert sorted(t.run for t in timings) == ["g0.5-seed0", "g1.0-seed0"] and all(t.cpu_s > 0 for t in timings)
    recorded = read_timings(tmp_path / "two")  # each row names the processor its seconds were measured on
    assert sorted(row["run"] for row in recorded) == ["g0.5-seed0", "g1.0-seed0"]
    assert {row["cpu"] for row in recorded} == {cpu_name()} and cpu_name()
    for run in runs:
        name = run.config.run_name
        assert _untimed(_rows(tmp_path / "one" / name / "metrics.jsonl")) == _untimed(
            _rows(tmp_path / "two" / name / "metrics.jsonl")
        )
        assert read_evaluations(tmp_path / "one" / name) == read_evaluations(tmp_path / "two" / name)


def _fake_run(root, name, seed, successes, max_steps=None, evaluation=None):
    run = root / f"{name}-seed{seed}"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"max_steps": max_steps or len(successes), "seed": seed}))
    (run / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": i, "sampler/success_rate": s}) + "\n" for i, s in enumerate(successes))
    )
    if evaluation is not None:
        (run / "eval.jsonl").write_text(
            json.dumps({"step": len(successes), "mode": "sampled", "success": evaluation}) + "\n"
        )


def test_outcome_and_contrast_tables_from_run_folders(tmp_path):
    root = tmp_path / "algorithms"
    for seed in range(6):
        _fake_run(root, "guess-rebn", seed, [0.0] * 12, evaluation=0.5 + seed / 100)
        _fake_run(root, "guess-grpo", seed, [0.0] * 12, evaluation=0.4 + seed / 50)
    _fake_run(root, "guess-ppo", 0, [0.5], max_steps=4, evaluation=1.0)  # unfinished: left out
    assert sorted(group_runs({"rebn-seed0": 1, "rebn-seed1": 2, "none-seed0": 3})) == ["none", "rebn"]
    table = outcome_table(root)
    assert list(table.index) == ["guess-grpo", "guess-rebn"] and set(table["source"]) == {"eval-sampled"}
    assert table.loc["guess-rebn", "success mean [95% CI]"].startswith("0.525 [")  # mean of 0.50..0.55
    contrasts = contrast_table(root, "algorithms")
    row = contrasts.loc["guess-rebn - guess-grpo: success"]
    # differences 0.10, 0.09, ..., 0.05: all positive, so the exact sign-flip p is 2/64
    assert row["seeds"] == 6 and row["difference"] == pytest.approx(0.075) and row["p"] == pytest.approx(2 / 64)
    assert row["p (Holm)"] == pytest.approx(2 / 64)  # the only contrast with both arms present
    assert row["verdict"] == "resolved: guess-rebn better"
    # both 0 in training
    same = contrast_table(root, "algorithms", source="train").loc["guess-rebn - guess-grpo: success"]
    assert (same["difference"], same["p"], same["verdict"]) == (0.0, 1.0, "not resolved")


def test_the_smollm2_figure_draws_each_advantage_on_the_held_out_sums(tmp_path):
    root = tmp_path / "smollm2"
    for seed in range(3):
        for method, held_out in (("grpo", 0.5), ("reinforce", 0.2)):
            _fake_run(root, f"smollm2-{method}", seed, [0.1] * 20)
            rows = [{"step": step, "mode": mode, "success": held_out * step / 20 + seed / 100 + (mode == "greedy") / 10}
                    for step in (10, 20) for mode in ("sampled", "greedy")]
            (root / f"smollm2-{method}-seed{seed}" / "eval.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in rows)
            )
    figure = smollm2_figure(root)
    training, sampled, greedy = figure.axes[:3]
    assert [t.get_text() for t in training.get_legend().get_texts()][:2] == [
        "GRPO (groups of 16, the preset) (n=3)",
        "REINFORCE (raw returns) (n=3)",
    ]
    for ax, shift in ((sampled, 0.0), (greedy, 0.1)):
        curves = {bars.get_label(): bars.lines[0] for bars in ax.containers}  # errorbar: a data line and its bars
        assert sorted(curves) == ["GRPO (groups of 16, the preset) (n=3)", "REINFORCE (raw returns) (n=3)"]
        assert list(curves["GRPO (groups of 16, the preset) (n=3)"].get_ydata()) == pytest.approx(
            [0.26 + shift, 0.51 + shift]
        )  # means over seeds
    assert outcome_table(root, source="eval-greedy").loc["smollm2-grpo", "success mean [95% CI]"].startswith("0.61 [")


def test_best_learning_rates_are_chosen_per_method_on_the_tuning_runs(tmp_path):
    root = tmp_path / "tuning"
    for seed in TUNING_SEEDS:
        for lr in LEARNING_RATES:
            _fake_run(root, f"guess-rebn-lr{lr:g}", seed, [0.0] * 3, evaluation=0.9 if lr == LEARNING_RATES[0] else 0.3)
    _fake_run(root, f"guess-ppo-lr{LEARNING_RATES[0]:g}", 100, [0.0], evaluation=1.0)  # an incomplete sweep
    assert best_learning_rates(root) == {"guess-rebn": LEARNING_RATES[0]}
    with pytest.raises(FileNotFoundError, match="--study tuning"):
        best_learning_rates(tmp_path / "missing")


def test_a_study_run_reruns_from_its_config_json_with_the_same_metrics(tmp_path):
    from gemlab.train import main

    rates = {f"guess-{m}": 2e-3 for m in ("reinforce", "rebn", "grpo", "ppo")}
    run = study_runs(
        "algorithms", tmp_path / "data", steps=2, seeds=[0], learning_rates=rates, environments=["guess"], eval_every=0
    )[2]
    config = chz.replace(run.config, batch_size=16, num_env=8)
    assert config.advantage == "grpo"  # grouped envs and per-episode advantages, the most state to replay
    run_studies([Run(config, eval_every=0)], progress=False)
    saved = tmp_path / "data" / "algorithms" / config.run_name
    assert main([f"config={saved / 'config.json'}", f"log_dir={tmp_path / 'again'}"]) == 0
    again = _rows(tmp_path / "again" / config.run_name / "metrics.jsonl")
    assert _untimed(again) == _untimed(_rows(saved / "metrics.jsonl"))
    assert main([f"config={tmp_path / 'missing.json'}"]) == 2


def test_the_estimate_prices_a_step_by_its_recorded_cpu_seconds(tmp_path):
    """A study's timings.jsonl gives CPU seconds per step (evaluations included), which a loaded
    recording machine inflates less than wall time; the wall time/step of old runs is only the fallback."""
    run = _tiny_run(tmp_path, "a")  # arm "r", 4 steps, nothing run yet
    reference = tmp_path / "ref"
    reference.mkdir()
    (reference / "timings.jsonl").write_text(
        json.dumps({"run": "other-seed0", "steps": 5, "wall_s": 50.0, "cpu_s": 5.0}) + "\n"
        + json.dumps({"run": "r-seed7", "steps": 10, "wall_s": 500.0, "cpu_s": 100.0}) + "\n"
    )
    assert estimate_seconds([run], [reference]) == (40.0, [])
    assert estimate_seconds([run], [reference], jobs=2) == (20.0, [])
    newer = tmp_path / "newer"  # the most recent timing of the arm prices it, wherever it was recorded
    newer.mkdir()
    (newer / "timings.jsonl").write_text(
        json.dumps({"run": "r-seed1", "steps": 4, "wall_s": 9.0, "cpu_s": 8.0, "time": 2.0}) + "\n"
    )
    assert estimate_seconds([run], [reference, newer]) == (8.0, [])
    (newer / "timings.jsonl").write_text(
        json.dumps({"run": "r-lr0.004-seed100", "steps": 4, "wall_s": 9.0, "cpu_s": 12.0, "time": 3.0}) + "\n"
    )
    assert estimate_seconds([run], [newer]) == (12.0, [])  # a tuning run of the arm prices it too


def _reproduce_gem():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "reproduce_gem", Path(__file__).parents[2] / "research" / "experiments" / "reproduce_gem.py"
    )
    reproduce_gem = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reproduce_gem)
    return reproduce_gem


def test_the_estimate_waits_for_a_tuning_study_that_is_not_finished(tmp_path, capsys):
    """A tuning study with one environment's sweep finished: the algorithms study over every
    environment has no rates yet, so --estimate-only says so in a line and goes on (exit 0)."""
    reproduce_gem = _reproduce_gem()
    for run in study_runs("tuning", tmp_path, environments=["products"], seeds=[100], steps=1):
        folder = tmp_path / "tuning" / run.name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(chz.asdict(run.config)))
        (folder / "metrics.jsonl").write_text(json.dumps({"step": 0, "sampler/success_rate": 0.5}) + "\n")
        (folder / "eval.jsonl").write_text(json.dumps({"step": 1, "mode": "sampled", "success": 0.5}) + "\n")
    code = reproduce_gem.main(
        ["--study", "algorithms", "--env", "products", "--env", "sums", "--estimate-only", "--root", str(tmp_path)]
    )
    assert code == 0
    assert "algorithms: no estimate yet (no tuned learning rate for sums-reinforce" in capsys.readouterr().out


def test_the_gamma_outcomes_figure_puts_each_seeds_last_evaluation_beside_its_mean(tmp_path):
    from gemlab.studies.figures import gamma_outcomes_figure

    root = tmp_path / "smollm2-gamma"
    wins = {0.5: [0.2, 0.4, 0.6], 1.0: [0.5, 0.7, 0.9]}
    for gamma, values in wins.items():
        for seed, value in enumerate(values):
            _fake_run(root, f"smollm2-easy-gamma{gamma}", seed, [0.3] * 4)
            rows = [  # an earlier evaluation, then the last: only the last is drawn
                {"step": 2, "mode": "sampled", "success": 0.0, "turns_per_won_game": 1.0},
                {"step": 4, "mode": "sampled", "success": value, "turns_per_won_game": 2 + value},
            ]
            (root / f"smollm2-easy-gamma{gamma}-seed{seed}" / "eval.jsonl").write_text(
                "".join(json.dumps(row) + "\n" for row in rows)
            )
    figure = gamma_outcomes_figure([("SmolLM2, 1-10 in 4 turns", root, "smollm2-easy-", 10, 4)])
    (success, turns) = figure.axes
    assert [t.get_text() for t in success.get_xticklabels()] == ["γ = 0.5\n(n=3)", "γ = 1\n(n=3)"]
    means = [float(line.get_ydata()[0]) for line in success.lines if line.get_marker() == "o"]
    assert means == pytest.approx([0.4, 0.7])
    dots = [sorted(c.get_offsets()[:, 1]) for c in success.collections if len(c.get_offsets()) == 3]
    assert dots == [pytest.approx([0.2, 0.4, 0.6]), pytest.approx([0.5, 0.7, 0.9])]
    legend = [t.get_text() for t in turns.get_legend().get_texts()]
    assert legend == ["binary search: 2.90", "random consistent: 2.81"]


def test_arm_patterns_choose_the_runs_of_a_study(tmp_path, capsys, monkeypatch):
    reproduce_gem = _reproduce_gem()
    monkeypatch.setattr(reproduce_gem, "REFERENCES", ())  # no recorded step times but the study's own
    root = ["--study", "smollm2-gamma", "--estimate-only", "--root", str(tmp_path)]
    assert reproduce_gem.main(root) == 0
    assert capsys.readouterr().out.startswith("smollm2-gamma: 48 runs;")  # 8 seeds x 3 discounts x 2 games
    assert reproduce_gem.main([*root, "--arm", "smollm2-easy-gamma0.5", "--arm", "smollm2-easy-gamma1.*"]) == 0
    assert capsys.readouterr().out.startswith("smollm2-gamma: 16 runs;")  # 8 seeds x 2 arms
    assert reproduce_gem.main([*root, "--arm", "smollm2-hard-*"]) == 2
    assert capsys.readouterr().err == "reproduce_gem: no arm of smollm2-gamma matches smollm2-hard-*\n"
    sweeps = ["--study", "smollm2-tuning", "--study", "smollm2-algorithms", "--estimate-only", "--root", str(tmp_path)]
    assert reproduce_gem.main(sweeps) == 0  # 3 advantages x 3 rates x 2 tuning seeds; no rates yet for the comparison
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "smollm2-tuning: 18 runs; no estimate: no step time is recorded for any of its arms"
    folder = tmp_path / "smollm2-tuning"
    assert out[1].startswith(f"smollm2-algorithms: no estimate yet (no smollm2-tuning study under {folder}: run")
    assert out[1].endswith("smollm2-tuning` first (the smollm2-algorithms study uses its rates))")


def test_ctrl_c_during_the_runs_says_how_to_resume_in_one_line(tmp_path, capsys, monkeypatch):
    reproduce_gem = _reproduce_gem()

    def interrupted(runs, **_):
        raise KeyboardInterrupt

    monkeypatch.setattr(reproduce_gem, "run_studies", interrupted)
    code = reproduce_gem.main(["--study", "smollm2-gamma", "--seeds", "0", "--root", str(tmp_path)])
    assert code == 130
    err = capsys.readouterr().err.strip()
    assert err == (
        "reproduce_gem: interrupted; run the same command again: finished runs are skipped, "
        "unfinished ones resume from their last checkpoint"
    )
