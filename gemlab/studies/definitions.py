"""The GEM paper's two studies at laptop scale, as run configs.

- ``gamma``: REINFORCE + ReBN on GuessTheNumber 1-20 (20 turns) with gamma 0.5, 0.9 and 1.0. Any
  consistent player wins within 20 turns, so only gamma < 1 rewards winning *fast*.
- ``algorithms``: REINFORCE (raw returns), REINFORCE + ReBN, GRPO (groups of 8 envs on one
  problem, trajectory-level, gamma 1) and PPO-style updates (Tinker's clipped ``ppo`` loss on
  ReBN advantages, 4 minibatch updates per batch) on the multi-turn easy GuessTheNumber and on
  the single-turn ``rg:products-1digit``.

Every run is an ordinary run folder under ``<root>/<study>/<run>/``; ``runner.py`` makes them
(``benchmarks/reproduce_gem.py`` is the command), ``figures.py`` reads them into tables and figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from gemlab.config import Config, make_config
from gemlab.studies.variants import GUESS_20, PRODUCTS_1DIGIT
from gemlab.tiny.registry import TINY, TINY_GUESS20, TINY_PRODUCTS

STUDIES = ("gamma", "algorithms")
SEEDS = (0, 1, 2)
STEPS = 40  # per run; the whole regeneration's time is in the README and notebook 08
GAMMAS = (0.5, 0.9, 1.0)
# Shared by every run: the laptop preset (gemlab/tiny family, lr 2e-3, LoRA rank 8) at batch 64.
COMMON: dict[str, Any] = dict(batch_size=64, save_every=10)
GAMMA_SETTING: dict[str, Any] = dict(model_name=TINY_GUESS20, env_id=GUESS_20, num_env=8)
ENVIRONMENTS: dict[str, dict[str, Any]] = {
    "guess": dict(model_name=TINY, env_id="game:GuessTheNumber-v0-easy", num_env=32),
    "products": dict(model_name=TINY_PRODUCTS, env_id=PRODUCTS_1DIGIT, template="qwen3_general", num_env=32),
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


def study_configs(study: str, root: str | Path = "data/figures", *, steps: int = STEPS, seeds: Sequence[int] = SEEDS) -> list[Config]:
    """Every run of ``study`` as a ``Config`` whose run folder is ``<root>/<study>/<run>``, seed by
    seed (so a partial regeneration already compares every setting on the first seeds)."""
    if study not in STUDIES:
        raise ValueError(f"Unknown study {study!r}. Known studies: {', '.join(STUDIES)}")
    log_dir = str(Path(root) / study)
    base = dict(COMMON, max_steps=steps, log_dir=log_dir)
    if study == "gamma":
        return [
            make_config("laptop", **base, **GAMMA_SETTING, gamma=gamma, seed=seed, run_name=f"gamma{gamma}-seed{seed}")
            for seed in seeds
            for gamma in GAMMAS
        ]
    return [
        make_config("laptop", **base, **setting, **METHODS[method], seed=seed, run_name=f"{env}-{method}-seed{seed}")
        for seed in seeds
        for env, setting in ENVIRONMENTS.items()
        for method in METHODS
    ]


