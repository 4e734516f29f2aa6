"""The GEM paper's two studies at laptop scale: their runs, a resumable runner, and their tables.

- ``gamma``: REINFORCE + ReBN on GuessTheNumber 1-20 (20 turns) with gamma 0.5, 0.9 and 1.0. Any
  consistent player wins within 20 turns, so only gamma < 1 rewards winning *fast*.
- ``algorithms``: REINFORCE (raw returns), REINFORCE + ReBN, GRPO (groups of 8 envs on one
  problem, trajectory-level, gamma 1) and PPO-style updates (Tinker's clipped ``ppo`` loss on
  ReBN advantages, 4 minibatch updates per batch) on the multi-turn easy GuessTheNumber and on
  the single-turn ``rg:products-1digit``.

Every run is an ordinary run folder (``config.json`` + ``metrics.jsonl``, as ``python -m
gemlab.train`` writes them) under ``<root>/<study>/<run>/``; ``benchmarks/reproduce_gem.py`` is
the command that makes them all. A finished run (``max_steps`` rows, no checkpoint list left) is
skipped, an unfinished one resumes from its last checkpoint, so an interrupted command can simply
be run again.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from gemlab.config import Config, make_config
from gemlab.config import CONFIG_FILE
from gemlab.run_folder import CHECKPOINTS_FILE, METRICS_FILE, read_rows, read_run
from gemlab.trainer import Trainer
from gemlab.variants import GUESS_20, PRODUCTS_1DIGIT

STUDIES = ("gamma", "algorithms")
SEEDS = (0, 1, 2)
STEPS = 40  # per run; the whole regeneration's time is in the README and notebook 08
WINDOW = 10  # first-10 / last-10 steps in the tables
GAMMAS = (0.5, 0.9, 1.0)
KEEP = (CONFIG_FILE, METRICS_FILE)  # what a finished run folder holds
# Shared by every run: the laptop preset (gemlab/tiny family, lr 2e-3, LoRA rank 8) at batch 64.
COMMON: dict[str, Any] = dict(batch_size=64, save_every=10)
GAMMA_SETTING: dict[str, Any] = dict(model_name="gemlab/tiny-guess20", env_id=GUESS_20, num_env=8)
ENVIRONMENTS: dict[str, dict[str, Any]] = {
    "guess": dict(model_name="gemlab/tiny", env_id="game:GuessTheNumber-v0-easy", num_env=32),
    "products": dict(model_name="gemlab/tiny-products", env_id=PRODUCTS_1DIGIT, template="qwen3_general", num_env=32),
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


def steps_done(config: Config) -> int:
    """Steps of this run already in its ``metrics.jsonl`` and safe to keep: all of them when the
    run finished, else those up to its last checkpoint (what the trainer resumes from)."""
    run_dir = Path(config.log_dir) / config.resolved_run_name
    rows = read_rows(run_dir / METRICS_FILE).rows
    if len(rows) >= config.max_steps:
        return config.max_steps
    checkpoints = read_rows(run_dir / CHECKPOINTS_FILE).rows
    return int(checkpoints[-1]["step"]) if checkpoints else 0


def run_configs(configs: Iterable[Config], *, progress: bool = True) -> None:
    """Run every config to ``max_steps``: skip finished runs, resume unfinished ones from their
    last checkpoint, restart those with none. One progress bar counts the steps of all runs.
    A finished run keeps only ``config.json`` and ``metrics.jsonl`` (checkpoints are local)."""
    configs = list(configs)
    done = {config.resolved_run_name: steps_done(config) for config in configs}
    total = sum(config.max_steps for config in configs)
    with tqdm(total=total, initial=sum(done.values()), desc="reproduce_gem", unit="step", disable=not progress) as bar:
        for config in configs:
            run_dir = Path(config.log_dir) / config.resolved_run_name
            if done[config.resolved_run_name] == 0:
                shutil.rmtree(run_dir, ignore_errors=True)  # nothing to resume from: start clean
            if done[config.resolved_run_name] < config.max_steps:
                bar.set_postfix(run=config.resolved_run_name)
                trainer = Trainer(config, progress=False)
                try:
                    while trainer.step_index < config.max_steps:
                        trainer.step()
                        bar.update(1)
                finally:
                    trainer.close()
            for extra in run_dir.iterdir():  # checkpoints (and their list) are only for resuming
                if extra.name not in KEEP:
                    shutil.rmtree(extra) if extra.is_dir() else extra.unlink()


def load_study(folder: str | Path) -> dict[str, pd.DataFrame]:
    """Every finished run of a study folder (``max_steps`` rows, per its ``config.json``): run
    name -> its metrics, one row per step. Unfinished runs are left out, so that a study that is
    still being regenerated compares only runs of the same length."""
    folder = Path(folder)
    runs = {}
    for path in sorted(folder.glob(f"*/{METRICS_FILE}")):
        run = read_run(path.parent)
        if run.steps_done >= run.config["max_steps"]:
            runs[run.name] = run.metrics
    if not runs:
        raise FileNotFoundError(f"no finished runs under {folder}: run `python benchmarks/reproduce_gem.py` first")
    return runs


def group_runs(runs: dict[str, Any]) -> dict[str, list[Any]]:
    """Runs grouped by their name without the ``-seedN`` suffix (e.g. ``gamma0.5``)."""
    groups: dict[str, list[Any]] = {}
    for name, run in runs.items():
        groups.setdefault(name.rsplit("-seed", 1)[0], []).append(run)
    return groups


def _window_means(frames: list[pd.DataFrame], metric: str, window: int) -> tuple[np.ndarray, np.ndarray]:
    first = np.array([frame[metric].head(window).mean() for frame in frames])
    last = np.array([frame[metric].tail(window).mean() for frame in frames])
    return first, last


def summary_table(folder: str | Path, metrics: Sequence[str] = ("sampler/success_rate",), *, window: int = WINDOW) -> pd.DataFrame:
    """Per group of seeds: mean and standard deviation over seeds of each metric's first-``window``
    and last-``window`` step averages, and the number of seeds."""
    rows = []
    for group, frames in group_runs(load_study(folder)).items():
        row: dict[str, Any] = {"run": group, "seeds": len(frames)}
        for metric in metrics:
            short = metric.split("/")[-1]
            first, last = _window_means(frames, metric, window)
            row.update({f"{short} first": first.mean(), f"{short} last": last.mean(), f"{short} last std": last.std()})
            row[f"{short} gain"] = (last - first).mean()
        rows.append(row)
    return pd.DataFrame(rows).set_index("run")


def gamma_figure(folder: str | Path, *, smoothing: int = 5) -> Any:
    """Success rate and turns per won episode per gamma (mean and one-std band over seeds), with
    the exact turns of binary search and of the random consistent player as horizontal lines."""
    import matplotlib.pyplot as plt

    from gemlab import plots
    from gemlab.guessing import binary_search, random_consistent

    groups = group_runs(load_study(folder))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), constrained_layout=True)
    plots.plot_seed_bands(groups, "sampler/success_rate", smoothing=smoothing, ax=axes[0])
    axes[0].set_ylim(0, 1.02)
    plots.plot_seed_bands(groups, "sampler/num_turns_per_won_episode", smoothing=smoothing, ax=axes[1])
    for player, style in ((binary_search, "--"), (random_consistent, ":")):
        turns = float(player(20, 20).turns_when_won)
        axes[1].axhline(turns, color="black", ls=style, lw=1.2, label=f"{player.__name__.replace('_', ' ')}: {turns:.2f}")
    axes[1].legend()
    fig.suptitle("GuessTheNumber 1-20 (20 turns), REINFORCE + ReBN: the discount factor")
    return fig


def algorithms_figure(folder: str | Path, *, smoothing: int = 5) -> Any:
    """Success rate per method (mean and one-std band over seeds), one panel per environment."""
    import matplotlib.pyplot as plt

    from gemlab import plots

    groups = group_runs(load_study(folder))
    envs = [env for env in ENVIRONMENTS if any(name.startswith(f"{env}-") for name in groups)]
    fig, axes = plt.subplots(1, len(envs), figsize=(6.5 * len(envs), 4.5), constrained_layout=True, squeeze=False)
    titles = {"guess": "GuessTheNumber 1-10 (multi-turn)", "products": "rg:products-1digit (single-turn)"}
    for ax, env in zip(axes[0], envs):
        mine = {METHOD_LABELS[name.split("-", 1)[1]]: runs for name, runs in groups.items() if name.startswith(f"{env}-")}
        plots.plot_seed_bands(mine, "sampler/success_rate", smoothing=smoothing, ax=ax, title=titles[env])
        ax.set_ylim(0, 1.02)
    fig.suptitle("Algorithm comparison at laptop scale")
    return fig
