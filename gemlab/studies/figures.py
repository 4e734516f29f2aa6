"""The studies' tables and figures, read from their run folders: each arm's outcome over seeds
with a 95% interval, the pre-registered contrasts (``definitions.CONTRASTS``) with their paired
intervals and Holm-adjusted p-values, and the words that follow from them.

An outcome is one number per run, from one of three sources: ``eval-sampled`` / ``eval-greedy``
(the last evaluation on the fixed set, ``eval.jsonl``; the low-noise metric) or ``train`` (the
mean of the last ``WINDOW`` training steps' metrics; what runs without evaluations have).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from gemlab import plots
from gemlab.saved_runs import METRICS_FILE, read_run
from gemlab.studies import stats
from gemlab.studies.definitions import (
    CONTRASTS,
    ENVIRONMENT_TITLES,
    ENVIRONMENTS,
    METHOD_LABELS,
    METHODS,
    SMOLLM2_GAMES,
    SMOLLM2_LABELS,
    SMOLLM2_TOOL_LABELS,
    TUNED_BY,
    tuning_sweep,
)
from gemlab.studies.evaluation import read_evaluations
from gemlab.studies.guessing import binary_search, fixed_games, guessing_habits, random_consistent, read_guesses
from gemlab.studies.held_out_runs import mean_interval

WINDOW = 10  # last-10 steps for the training source
SOURCES = ("auto", "eval-sampled", "eval-greedy", "train")
TRAIN_METRICS = {
    "success": "sampler/success_rate",
    "turns_per_won_game": "sampler/num_turns_per_won_episode",
    "turns_per_game": "sampler/num_turns_per_episode",
}
TABLE_METRICS = {
    "gamma": ("success", "turns_per_won_game", "turns_per_game"),
    "tuning": ("success",),
    "algorithms": ("success",),
    "smollm2": ("success",),
    "smollm2-gamma": ("success", "turns_per_won_game", "turns_per_game"),
    "smollm2-tool-use": ("success", "turns_per_game"),  # 2 turns: the tool was called
    "smollm2-tuning": ("success",),
    "smollm2-algorithms": ("success", "turns_per_won_game", "turns_per_game"),
}
ALPHA = 0.05


def load_study(folder: str | Path) -> dict[str, Any]:
    """Every finished run of a study folder (``max_steps`` rows, per its ``config.json``): run
    name -> its ``SavedRun``. Unfinished runs are left out, so that a study that is still being
    regenerated compares only runs of the same length."""
    folder = Path(folder)
    runs = {}
    for path in sorted(folder.glob(f"*/{METRICS_FILE}")):
        run = read_run(path.parent)
        if run.steps_done >= run.config["max_steps"]:
            runs[run.name] = run
    if not runs:
        raise FileNotFoundError(
            f"no finished runs under {folder}: run `python research/experiments/reproduce_gem.py` first"
        )
    return runs


def group_runs(runs: dict[str, Any]) -> dict[str, list[Any]]:
    """Runs grouped by their name without the ``-seedN`` suffix (e.g. ``gamma0.5``)."""
    groups: dict[str, list[Any]] = {}
    for name, run in runs.items():
        groups.setdefault(name.rsplit("-seed", 1)[0], []).append(run)
    return groups


def resolve_source(runs: dict[str, Any], source: str) -> str:
    """``auto`` -> ``eval-sampled`` when every run has evaluations, else ``train``."""
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}; got {source!r}")
    if source != "auto":
        return source
    return "eval-sampled" if all(read_evaluations(run.path) for run in runs.values()) else "train"


def run_outcome(run: Any, metric: str, source: str) -> float:
    """One run's ``metric`` from ``source`` (see the module docstring)."""
    if source == "train":
        return float(run.metrics[TRAIN_METRICS[metric]].tail(WINDOW).mean())
    mode = source.split("-", 1)[1]
    rows = [row for row in read_evaluations(run.path) if row["mode"] == mode]
    if not rows:
        raise FileNotFoundError(f"{run.path} has no {mode} evaluation: use source='train'")
    return float(max(rows, key=lambda row: row["step"])[metric])


def arm_outcomes(folder: str | Path, metric: str, source: str = "auto") -> tuple[dict[str, dict[int, float]], str]:
    """arm -> {seed: outcome} for every finished run of the study folder, and the source used."""
    runs = load_study(folder)
    source = resolve_source(runs, source)
    arms: dict[str, dict[int, float]] = {}
    for arm, members in group_runs(runs).items():
        arms[arm] = {int(run.config["seed"]): run_outcome(run, metric, source) for run in members}
    return arms, source


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def outcome_table(folder: str | Path, metrics: Sequence[str] | None = None, *, source: str = "auto") -> pd.DataFrame:
    """Per arm: seeds, and for each metric the mean and the IQM over seeds, each with its 95%
    percentile bootstrap interval over seeds (``stats.interval``), as ``value [low, high]``."""
    folder = Path(folder)
    metrics = metrics or TABLE_METRICS.get(folder.name, ("success",))
    rows: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        arms, used = arm_outcomes(folder, metric, source)
        for arm, by_seed in arms.items():
            values = _finite(list(by_seed.values()))
            row = rows.setdefault(arm, {"seeds": len(by_seed), "source": used})
            if values:
                row[f"{metric} mean [95% CI]"] = str(stats.interval(values, "mean"))
                row[f"{metric} IQM [95% CI]"] = str(stats.interval(values, "iqm"))
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("arm")


def _last_actions(run: Any, mode: str) -> tuple[str, list[str]] | None:
    """A run's evaluation env and its games' actions at its last evaluation in ``mode`` (None when
    its evaluations recorded no actions: runs from before 2026-11-30)."""
    rows = [row for row in read_evaluations(run.path) if row["mode"] == mode and "actions" in row]
    if not rows:
        return None
    return run.config["eval_env_id"] or run.config["env_id"], max(rows, key=lambda row: row["step"])["actions"]


def guessing_table(folder: str | Path, *, mode: str = "greedy") -> pd.DataFrame:
    """Per arm of a GuessTheNumber study: how its players used the hints at the last evaluation
    (``guessing.guessing_habits`` of each seed's games): the share of guesses that halve the range
    the hints allow (bisection: all) and of later guesses within it, means over seeds with 95%
    bootstrap intervals, and the first guesses most played. Descriptive, beside the contrasts."""
    rows: dict[str, dict[str, Any]] = {}
    for arm, members in group_runs(load_study(folder)).items():
        habits = [
            guessing_habits(env_id, [read_guesses(a) for a in actions])
            for env_id, actions in filter(None, (_last_actions(run, mode) for run in members))
        ]
        if habits:
            firsts = Counter(g for h in habits for g in h.first_guesses)
            rows[arm] = {
                "seeds": len(habits),
                "guesses halving the range [95% CI]": str(stats.interval([h.halving_share for h in habits], "mean")),
                "later guesses within the hints [95% CI]": str(
                    stats.interval(_finite([h.within_share for h in habits]), "mean")
                ),
                "first guesses (games)": ", ".join(f"{g} ({n})" for g, n in firsts.most_common(3)),
            }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("arm")


def guess_sequences(folder: str | Path, run_name: str, *, games: int = 8, mode: str = "greedy") -> list[str]:
    """The first ``games`` games of one run's last evaluation, each as ``secret: guess guess ...``."""
    recorded = _last_actions(read_run(Path(folder) / run_name), mode)
    if recorded is None:
        raise FileNotFoundError(f"{Path(folder) / run_name} recorded no {mode} games (runs from before 2026-11-30)")
    env_id, actions = recorded
    shown = actions[:games]
    return [
        f"{secret}: {' '.join(map(str, read_guesses(a)))}"
        for (secret, _, _), a in zip(fixed_games(env_id, len(shown)), shown, strict=True)
    ]


def verdict(contrast: Any, differences: Sequence[float], low: float, high: float, p: float, p_holm: float) -> str:
    """Words that follow the numbers: "resolved" only when the Holm-adjusted p is below 5% and the
    interval excludes 0; "suggestive" when the unadjusted p is below 5% but not the adjusted one;
    else "not resolved" (noting when every seed agrees on the sign: a bootstrap interval over
    few seeds is too narrow, so it alone resolves nothing)."""
    if not differences:
        return "no data"
    mean = float(np.mean(differences))
    better = (mean < 0) == contrast.lower_is_better
    direction = f"{contrast.treatment} {'better' if better else 'worse'}"
    excludes_zero = math.isfinite(low) and (low > 0 or high < 0)
    if p_holm < ALPHA and excludes_zero:
        return f"resolved: {direction}"
    if p < ALPHA:
        return f"suggestive ({direction}), not resolved after Holm"
    if all(d > 0 for d in differences) or all(d < 0 for d in differences):
        return f"not resolved (every seed: {direction})"
    return "not resolved"


def contrast_table(folder: str | Path, study: str, *, source: str = "auto", power: float = 0.8) -> pd.DataFrame:
    """The study's pre-registered contrasts, paired by seed: mean difference with its 95%
    bootstrap interval, the exact sign-flip p and its Holm adjustment over the study's
    contrasts, the SD of the paired differences and the seeds per arm a paired test would need
    for ``power`` at the observed difference (``stats.seeds_needed``), and the verdict."""
    rows = []
    for contrast in CONTRASTS[study]:
        arms, used = arm_outcomes(folder, contrast.metric, source)
        if contrast.treatment not in arms or contrast.control not in arms:
            continue
        treated, control = arms[contrast.treatment], arms[contrast.control]
        seeds = sorted(
            s for s in set(treated) & set(control) if math.isfinite(treated[s]) and math.isfinite(control[s])
        )
        x, y = [treated[s] for s in seeds], [control[s] for s in seeds]
        result = stats.paired_contrast(x, y)
        sd = float(np.std(np.subtract(x, y), ddof=1)) if len(seeds) > 1 else math.nan
        rows.append({
            "contrast": contrast.name, "source": used, "seeds": len(seeds), "difference": result.difference,
            "CI low": result.low, "CI high": result.high, "p": result.p, "SD of differences": sd,
            "seeds needed (80% power)": stats.seeds_needed(result.difference, sd, power=power),
            "_contrast": contrast, "_differences": list(np.subtract(x, y)),
        })
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    table.insert(table.columns.get_loc("p") + 1, "p (Holm)", stats.holm(table["p"]))
    table["verdict"] = [
        verdict(r["_contrast"], r["_differences"], r["CI low"], r["CI high"], r["p"], r["p (Holm)"])
        for _, r in table.iterrows()
    ]
    return table.drop(columns=["_contrast", "_differences"]).set_index("contrast")


def aggregate_table(folder: str | Path, *, source: str = "auto") -> pd.DataFrame:
    """Per method, success pooled over the environments: IQM and mean with 95% stratified
    bootstrap intervals (seeds resampled within each environment, as rliable recommends)."""
    arms, used = arm_outcomes(folder, "success", source)
    rows = {}
    for method in METHODS:
        strata = [list(arms[f"{env}-{method}"].values()) for env in ENVIRONMENTS if f"{env}-{method}" in arms]
        if strata:
            rows[METHOD_LABELS[method]] = {
                "environments": len(strata), "source": used,
                "success IQM [95% CI]": str(stats.stratified_interval(strata, "iqm")),
                "success mean [95% CI]": str(stats.stratified_interval(strata, "mean")),
            }
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("method")


def best_learning_rates(folder: str | Path, study: str = "tuning", *, source: str = "auto") -> dict[str, float]:
    """Arm (``"env-method"``, ``"smollm2-game-method"``) -> the learning rate of the sweep ``study`` in
    ``folder`` with the highest mean success over its seeds, for every arm whose whole sweep has finished."""
    folder = Path(folder)
    tuned = next(name for name, sweep in TUNED_BY.items() if sweep == study)
    if not folder.exists():
        raise FileNotFoundError(
            f"no {study} study under {folder}: run `--study {study}` first (the {tuned} study uses its rates)"
        )
    arms, _ = arm_outcomes(folder, "success", source)
    best = {}
    for arm, sweep in tuning_sweep(study).items():
        scores = {lr: arms.get(name) for lr, name in sweep.items()}
        if all(scores.values()):
            best[arm] = max(sweep, key=lambda lr: np.mean(list((scores[lr] or {}).values())))
    if not best:
        raise FileNotFoundError(f"the {study} study under {folder} has no finished sweep: run `--study {study}` first")
    return best


# ----- figures -----------------------------------------------------------------------------
def _eval_curves(ax: plt.Axes, groups: dict[str, list[Any]], metric: str, mode: str = "sampled") -> bool:
    """Mean over seeds of ``metric`` on the fixed evaluation set per evaluated step, with 95%
    t-intervals; False when the runs have no evaluations."""
    tables = {
        arm: pd.DataFrame([row for run in runs for row in read_evaluations(run.path) if row["mode"] == mode])
        for arm, runs in groups.items()
    }
    tables = {arm: table for arm, table in tables.items() if not table.empty}
    steps = sorted({step for table in tables.values() for step in table["step"]})
    dodge = 0.04 * (min(np.diff(steps)) if len(steps) > 1 else 1)  # side by side, so overlapping bars stay readable
    for i, (arm, table) in enumerate(tables.items()):
        per_step = table.groupby("step")[metric]
        mean, sd, n = per_step.mean(), per_step.std(ddof=1), per_step.count()
        half = plots.t_half_width(sd, n)
        ax.errorbar(
            mean.index + dodge * (i - (len(tables) - 1) / 2),
            mean,
            yerr=half,
            marker="o",
            capsize=3,
            label=f"{arm} (n={n.max()})",
        )
    drawn = bool(tables)
    if drawn:
        ax.set(
            xlabel="step",
            ylabel=f"{metric.replace('_', ' ')} ({mode}, fixed set)",
            title="Fixed evaluation set (95% CI of the mean)",
        )
        ax.legend()
    return drawn


def _frames(groups: dict[str, list[Any]]) -> dict[str, list[pd.DataFrame]]:
    return {arm: [run.metrics for run in runs] for arm, runs in groups.items()}


def _env_panels(n: int, width: float, height: float) -> tuple[Any, list[plt.Axes]]:
    """A figure with one panel per environment, two to a row (so four stay readable in a
    notebook), and its used axes; a panel left over in the last row is hidden."""
    columns = min(n, 2)
    rows = -(-n // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(width * columns, height * rows), constrained_layout=True, squeeze=False
    )
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def gamma_figure(
    folder: str | Path,
    *,
    smoothing: int = 5,
    numbers: int = 20,
    turns: int = 20,
    title: str = "GuessTheNumber 1-20 (20 turns), REINFORCE + ReBN: the discount factor",
    arms: str = "",
    into: Any = None,
) -> Any:
    """Training success rate and turns per won episode per gamma (mean and 95% interval over
    seeds), with the exact turns of binary search and of the random consistent player on
    ``numbers`` numbers in ``turns`` turns as horizontal lines; and, when the runs have them, turns
    per won game on the fixed set. Only the arms whose names start with ``arms``; drawn ``into`` a
    (sub)figure when given, else a new figure."""
    groups = {arm: runs for arm, runs in group_runs(load_study(folder)).items() if arm.startswith(arms)}
    has_eval = any(read_evaluations(run.path) for runs in groups.values() for run in runs)
    fig = into or plt.figure(figsize=(19 if has_eval else 13, 4.5), constrained_layout=True)
    axes = fig.subplots(1, 3 if has_eval else 2)
    plots.plot_seed_bands(_frames(groups), "sampler/success_rate", smoothing=smoothing, ax=axes[0], band="ci95")
    axes[0].set_ylim(0, 1.02)
    turn_axes = [axes[1]]
    plots.plot_seed_bands(
        _frames(groups), "sampler/num_turns_per_won_episode", smoothing=smoothing, ax=axes[1], band="ci95"
    )
    if has_eval:
        _eval_curves(axes[2], groups, "turns_per_won_game")
        turn_axes.append(axes[2])
    for ax in turn_axes:
        for player, style in ((binary_search, "--"), (random_consistent, ":")):
            won = float(player(numbers, turns).turns_when_won)
            ax.axhline(won, color="black", ls=style, lw=1.2, label=f"{player.__name__.replace('_', ' ')}: {won:.2f}")
        ax.legend()
    fig.suptitle(title)
    return fig


def smollm2_gamma_figure(folder: str | Path, *, smoothing: int = 5) -> Any:
    """The ``smollm2-gamma`` study: ``gamma_figure`` for each of its games that has runs, one above the other."""
    arms = group_runs(load_study(folder))
    games = {
        name: shape for name, shape in SMOLLM2_GAMES.items() if any(a.startswith(f"smollm2-{name}-") for a in arms)
    }
    if not games:
        raise ValueError(f"{folder} holds no run of the smollm2-gamma study's games ({', '.join(SMOLLM2_GAMES)})")
    fig = plt.figure(figsize=(19, 4.8 * len(games)), constrained_layout=True)
    panels = fig.subfigures(len(games), 1, squeeze=False).flat
    for sub, (game, (_, numbers, turns)) in zip(panels, games.items(), strict=True):
        gamma_figure(
            folder,
            smoothing=smoothing,
            numbers=numbers,
            turns=turns,
            title=f"SmolLM2-135M-Instruct on GuessTheNumber 1-{numbers} ({turns} turns), ReBN: the discount factor",
            arms=f"smollm2-{game}-",
            into=sub,
        )
    return fig


def gamma_outcomes_figure(studies: Sequence[tuple[str, str | Path, str, int, int]], *, mode: str = "sampled") -> Any:
    """The discount's effect at the last evaluation on the fixed set, one column per study (``(title,
    folder, arm prefix, numbers, turns)``: e.g. the toy's ``gamma`` study beside ``smollm2-gamma``'s easy
    game): wins and turns per won game against gamma, every seed's outcome as a dot and the mean with
    its 95% t-interval; binary search's and the random consistent player's (``guessing``) as lines."""
    fig, axes = plt.subplots(2, len(studies), figsize=(6.5 * len(studies), 7.5), constrained_layout=True, squeeze=False)
    for column, (title, folder, prefix, numbers, turns) in enumerate(studies):
        players = {player: player(numbers, turns) for player in (binary_search, random_consistent)}
        for row, (metric, label) in enumerate((("success", "wins"), ("turns_per_won_game", "turns per won game"))):
            ax = axes[row][column]
            arms, _ = arm_outcomes(folder, metric, f"eval-{mode}")
            gammas = sorted(
                (float(arm.rsplit("gamma", 1)[1]), by_seed) for arm, by_seed in arms.items() if arm.startswith(prefix)
            )
            for i, (_, by_seed) in enumerate(gammas):
                values = _finite(list(by_seed.values()))
                spread = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else np.zeros(len(values))
                ax.scatter(i + spread, values, color="tab:gray", alpha=0.45, s=14, zorder=2)
                if values:
                    mean, low, _ = mean_interval(values)  # one seed: no interval
                    half = mean - low if math.isfinite(low) else 0.0
                    ax.errorbar(i, mean, yerr=half, fmt="o", color="tab:blue", capsize=6, ms=7, zorder=3)
                    ax.annotate(f"{mean:.2f}", (i + 0.18, mean), va="center", fontsize=9)
            for (player, exact), style in zip(players.items(), ("--", ":"), strict=True):
                reference = float(exact.win_rate if metric == "success" else exact.turns_when_won)
                name = player.__name__.replace("_", " ")
                ax.axhline(reference, color="black", ls=style, lw=1.1, label=f"{name}: {reference:.2f}")
            ax.set_xticks(range(len(gammas)), [f"γ = {g:g}\n(n={len(b)})" for g, b in gammas])
            ax.set_xlim(-0.5, len(gammas) - 0.5)
            ax.set_ylabel(f"{label} ({mode}, last evaluation)")
            ax.legend(loc="best", fontsize=9)
            if row == 0:
                ax.set_ylim(0, 1.05)
                ax.set_title(title)
    return fig


def algorithms_figure(folder: str | Path, *, smoothing: int = 5) -> Any:
    """Training success rate per method (mean and 95% interval over seeds), one panel per environment."""
    groups = group_runs(load_study(folder))
    envs = [env for env in ENVIRONMENTS if any(name.startswith(f"{env}-") for name in groups)]
    fig, axes = _env_panels(len(envs), 7.5, 4.5)
    frames = _frames(groups)
    # methods in METHODS order, so each keeps its colour of the tuning figure
    for ax, env in zip(axes, envs, strict=True):
        mine = {METHOD_LABELS[method]: frames[f"{env}-{method}"] for method in METHODS if f"{env}-{method}" in frames}
        plots.plot_seed_bands(
            mine, "sampler/success_rate", smoothing=smoothing, ax=ax, title=ENVIRONMENT_TITLES[env], band="ci95"
        )
        ax.set_ylim(0, 1.02)
    fig.suptitle("Algorithm comparison at laptop scale")
    return fig


def tuning_figure(folder: str | Path, study: str = "tuning") -> Any:
    """Success (the tuning source) against learning rate, one line per method, one panel per environment
    (the SmolLM2 sweep: one panel, its game)."""
    arms, source = arm_outcomes(folder, "success")
    sweep = tuning_sweep(study)
    if study == "smollm2-tuning":
        lines = {SMOLLM2_LABELS[arm.rsplit("-", 1)[1]]: arm for arm in sweep}
        panels = {"GuessTheNumber 1-10, 4 turns (SmolLM2-135M-Instruct)": lines}
    else:
        panels = {
            ENVIRONMENT_TITLES[env]: {METHOD_LABELS[method]: f"{env}-{method}" for method in METHODS}
            for env in ENVIRONMENTS
            if any(arm.startswith(f"{env}-") for arm in arms)
        }
    fig, axes = _env_panels(len(panels), 6.5, 4)
    for ax, (title, lines) in zip(axes, panels.items(), strict=True):
        for label, tuned in lines.items():
            points = [(lr, np.mean(list(arms[name].values()))) for lr, name in sweep[tuned].items() if name in arms]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=label)
        ax.set(xscale="log", xlabel="learning rate", ylabel=f"success ({source})", title=title, ylim=(0, 1.02))
        rates = sorted({lr for tuned in lines.values() for lr in sweep[tuned]})
        ax.set_xticks(rates, [f"{lr:g}" for lr in rates], minor=False)  # the swept rates, not 10^k
        ax.minorticks_off()
        ax.legend()
    fig.suptitle("Learning-rate sweep (tuning seeds only)")
    return fig


def _arms_figure(
    folder: str | Path, labels: dict[str, str], rollouts: str, held_out: str, title: str, smoothing: int
) -> Any:
    """Training success per step (mean and 95% interval over seeds), then the fixed held-out set
    sampled and greedy at each evaluation (mean with its 95% t-interval), one line per arm of
    ``labels`` (arm -> its label) that the study folder has."""
    groups = group_runs(load_study(folder))
    labelled = {label: groups[arm] for arm, label in labels.items() if arm in groups}
    fig, axes = plt.subplots(1, 3, figsize=(19, 4.5), constrained_layout=True)
    plots.plot_seed_bands(
        _frames(labelled), "sampler/success_rate", smoothing=smoothing, ax=axes[0], title=rollouts, band="ci95"
    )
    for ax, mode in zip(axes[1:], ("sampled", "greedy"), strict=True):
        _eval_curves(ax, labelled, "success", mode)
        ax.set_title(f"{held_out}, {mode} (95% CI of the mean)")
    left, right = min(ax.get_xlim()[0] for ax in axes), max(ax.get_xlim()[1] for ax in axes)
    for ax in axes:  # one step axis: row i of the rollouts is update i, an evaluation at step n follows update n
        ax.set(ylim=(-0.03, 1.03), xlim=(left, right))  # a line at 0 or 1 is drawn whole
    fig.suptitle(title)
    return fig


def smollm2_figure(folder: str | Path, *, smoothing: int = 5) -> Any:
    """SmolLM2's three advantages on sums: training rollouts, then the held-out sums."""
    return _arms_figure(
        folder,
        {f"smollm2-{method}": label for method, label in SMOLLM2_LABELS.items()},
        "Training rollouts on the 57 training sums",
        "Held-out sums",
        "SmolLM2-135M-Instruct on sums after the format warm-up: which advantage",
        smoothing,
    )


def smollm2_tool_figure(folder: str | Path, *, smoothing: int = 1) -> Any:
    """SmolLM2 on products with GEM's python tool and without it: training rollouts, then the 64
    held-out products."""
    return _arms_figure(
        folder,
        {f"smollm2-{arm}": label for arm, label in SMOLLM2_TOOL_LABELS.items()},
        "Training rollouts (3-digit x 2-digit products)",
        "64 held-out products",
        "SmolLM2-135M-Instruct with GEM's python tool and without it, after each arm's format warm-up",
        smoothing,
    )


def smollm2_algorithms_figure(folder: str | Path, *, smoothing: int = 5) -> Any:
    """SmolLM2's three advantages on the easy game, each at its tuned rate: training games, then the
    64 fixed games."""
    return _arms_figure(
        folder,
        {f"smollm2-game-{method}": label for method, label in SMOLLM2_LABELS.items()},
        "Training games (GuessTheNumber 1-10, 4 turns)",
        "64 fixed games",
        "SmolLM2-135M-Instruct on the game, multi-turn: which advantage (each at its tuned rate)",
        smoothing,
    )


FIGURES = {
    "gamma": gamma_figure,
    "tuning": tuning_figure,
    "algorithms": algorithms_figure,
    "smollm2": smollm2_figure,
    "smollm2-gamma": smollm2_gamma_figure,
    "smollm2-tool-use": smollm2_tool_figure,
    "smollm2-tuning": lambda folder: tuning_figure(folder, "smollm2-tuning"),
    "smollm2-algorithms": smollm2_algorithms_figure,
}
