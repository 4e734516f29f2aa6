"""Does sampling ahead of the learner pay? The ``laptop`` preset synchronous (``max_staleness=0``,
GEM's loop) against ``max_staleness`` 1 and 2 with each loss, several seeds, through gemlab's real
trainer and the local backend (sampling and training on separate workers).

    python research/experiments/bench_async.py                                   # seeds 0 1 2, staleness 0 1 2
    python research/experiments/bench_async.py --seeds 0 1 2 3 4 5 --losses importance_sampling ppo --save-runs
    data/async-runs
    python research/experiments/bench_async.py --seeds 0 --staleness 0 1 max_steps=40
    python research/experiments/bench_async.py --from-runs data/async-runs --plot-dir research/notes/figures

Per run it prints the wall-clock time (from the first step's start: model loading is left out)
at which the success rate (fraction of episodes won), averaged over the last 5 steps, first
reaches 0.9 (``-`` if never; also 0.8, for runs that stop short of 0.9), the final success rate
(last 10 steps), the mean |sampler - learner| logprob difference on the trained tokens, the mean
staleness and the seconds per step; then a table per setting with the times relative to the
synchronous run of the same seed, and the paired contrasts (``gemlab.studies.async_runs``): final
success against the synchronous runs with 95% intervals, sign-flip p and Holm, and seconds per
step as a ratio. The synchronous run trains with ``importance_sampling`` whatever ``--losses``
says: with one minibatch per step its ratios are all 1, where ``ppo`` has the same gradient.
Runs are interleaved (seed 0 at every setting, then seed 1, ...) so a change in the machine's load
hits every setting alike; the load average is printed before and after. ``--plot-dir`` writes
``async-reward-vs-wall-clock.png`` and ``async-logprob-diff.png``. Not a test: timings depend on
the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import chz
import numpy as np
import pandas as pd

from gemlab.config import Config, config_from_argv
from gemlab.run_folder import export_run
from gemlab.saved_runs import RunFolderError
from gemlab.studies.async_runs import SYNC, TARGET, WINDOW, Setting, contrasts, saved_runs, summarize, summarize_saved
from gemlab.trainer import Trainer


def run_one(
    base: Config, setting: Setting, seed: int, log_dir: str, save_to: Path | None
) -> tuple[dict[str, float | None], Path]:
    """Train one setting at one seed; its summary and its run folder."""
    name = setting.run_name(seed)
    config = chz.replace(
        base,
        seed=seed,
        max_staleness=setting.staleness,
        loss_fn=setting.loss,
        log_dir=log_dir,
        run_name=name,
        save_every=-1,
    )
    trainer = Trainer(config, progress=False)
    try:
        history = trainer.run()
    finally:
        trainer.close()
    if save_to is not None:
        export_run(trainer.run_dir, save_to / name, config=config)
    return summarize(history), trainer.run_dir


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted, or ``-`` (as wide) when there is none."""
    width = int(spec.split(".")[0] or 0)
    return "-".rjust(width) if value is None else format(value, spec)


def table(results: dict[Setting, dict[int, dict]], all_seeds: list[int]) -> str:
    """One block per setting: per seed and mean, with times relative to the synchronous run."""
    head = (
        f"{'setting':>32} {'seed':>5} {'t(0.9) s':>9} {'x sync':>7} {'t(0.8) s':>9} {'x sync':>7} {'final':>6} "
        f"{'|dlogp|':>8} {'stale':>6} {'s/step':>7} {'wall s':>7}"
    )
    lines = [head]
    def ratio(r: dict, sync: dict | None, key: str) -> float | None:
        return r[key] / sync[key] if sync and r[key] and sync[key] else None

    def mean_of(values: list) -> float | None:
        values = [v for v in values if v is not None]
        return float(np.mean(values)) if values else None

    for setting, rows in results.items():
        ratios: dict[str, list] = {"to_target": [], "to_lower": []}
        seeds = [seed for seed in all_seeds if seed in rows]
        for seed in seeds:
            r, sync = rows[seed], results.get(SYNC, {}).get(seed)
            for key in ratios:
                ratios[key].append(ratio(r, sync, key))
            lines.append(
                f"{setting.label:>32} {seed:>5} {fmt(r['to_target'], '9.0f')} {fmt(ratios['to_target'][-1], '7.2f')} "
                f"{fmt(r['to_lower'], '9.0f')} {fmt(ratios['to_lower'][-1], '7.2f')} {r['final']:>6.3f} "
                f"{r['diff']:>8.4f} {r['staleness']:>6.2f} {r['per_step']:>7.2f} {r['wall']:>7.0f}"
            )
        reached = [rows[s]["to_target"] for s in seeds if rows[s]["to_target"] is not None]
        mean = lambda key: float(np.mean([rows[s][key] for s in seeds]))  # noqa: E731, B023  # used in this iteration
        lines.append(
            f"{setting.label:>32} {'mean':>5} {fmt(mean_of(reached), '9.0f')} "
            f"{fmt(mean_of(ratios['to_target']), '7.2f')} "
            f"{fmt(mean_of([rows[s]['to_lower'] for s in seeds]), '9.0f')} {fmt(mean_of(ratios['to_lower']), '7.2f')} "
            f"{mean('final'):>6.3f} {mean('diff'):>8.4f} {mean('staleness'):>6.2f} {mean('per_step'):>7.2f} "
            f"{mean('wall'):>7.0f}   ({len(reached)}/{len(seeds)} reached 0.9)"
        )
    return "\n".join(lines)


def report(results: dict[Setting, dict[int, dict]], seeds: list[int]) -> None:
    """The per-run table, then the paired contrasts."""
    print(table(results, seeds))
    found = contrasts(results)
    if len(found):
        print(
            "\nPaired by seed; final success = mean of the last 10 steps; 95% bootstrap intervals; exact "
            "sign-flip p; Holm over these rows"
        )
        with pd.option_context("display.width", 200, "display.max_columns", 20):
            print(found.round(3).to_string(index=False))


def plot(groups: dict[str, list[Path]], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    from gemlab import plots

    ax = plots.plot_vs_wall_clock(groups, smoothing=WINDOW, title="Success rate against wall-clock time")
    ax.axhline(TARGET, color="grey", ls="--", lw=1)
    ax.set_ylim(0, 1)
    first = plots.save_figure(ax, folder / "async-reward-vs-wall-clock.png")
    ax = plots.plot_seed_bands(
        groups, "train/logprob_diff_abs", smoothing=WINDOW, title="How off-policy: sampler vs learner logprob"
    )
    second = plots.save_figure(ax, folder / "async-logprob-diff.png")
    return [first, second]


def report_saved(folder: Path, plot_dir: Path | None) -> None:
    """The tables and plots of runs saved by ``--save-runs``."""
    runs = saved_runs(folder)
    if not runs:
        raise SystemExit(f"no saved runs (folders with a config.json) in {folder}")
    results = summarize_saved(runs)
    report(results, sorted(set().union(*results.values())))
    if plot_dir is not None:
        for path in plot({setting.label: list(by_seed.values()) for setting, by_seed in runs.items()}, plot_dir):
            print(f"plot: {path}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--losses", nargs="+", default=["importance_sampling"], help="losses of the runs with max_staleness > 0"
    )
    parser.add_argument(
        "--save-runs",
        type=Path,
        default=None,
        help="keep each run's metrics and config in DIR/<loss>-staleness<k>-seed<s>",
    )
    parser.add_argument(
        "--plot-dir", type=Path, default=None, help="write the reward-vs-wall-clock and logprob-difference PNGs here"
    )
    parser.add_argument(
        "--from-runs",
        type=Path,
        default=None,
        help="train nothing: tabulate and plot the runs saved in DIR by --save-runs",
    )
    parser.add_argument("overrides", nargs="*", help="Config fields as key=value, applied on top of the laptop preset")
    args = parser.parse_args()
    if args.from_runs is not None:
        if not args.from_runs.is_dir():
            raise SystemExit(f"bench_async: --from-runs needs a folder of saved runs; {args.from_runs} is not one")
        try:
            report_saved(args.from_runs, args.plot_dir)
        except RunFolderError as error:
            raise SystemExit(f"bench_async: {error}") from None
        return
    if min(args.staleness) < 0:
        raise SystemExit(
            f"bench_async: --staleness takes whole numbers >= 0 (0 is the synchronous loop); got {args.staleness}"
        )
    os.environ.setdefault("GEMLAB_THREADS", "1")

    try:  # every loss must be one the Trainer accepts
        config = config_from_argv(["preset=laptop", *args.overrides, *(f"loss_fn={loss}" for loss in args.losses)])
    except ValueError as error:
        raise SystemExit(f"bench_async: {error}") from None
    settings = [SYNC] * (0 in args.staleness) + [
        Setting(k, loss) for k in sorted(set(args.staleness) - {0}) for loss in args.losses
    ]
    print(f"laptop preset: steps={config.max_steps} batch={config.batch_size} num_env={config.num_env} "
          f"lr={config.learning_rate} threads per worker={os.environ['GEMLAB_THREADS']} cores={os.cpu_count()}; "
          f"{len(settings)} settings x {len(args.seeds)} seeds; load average before: {load_average()}",
          flush=True)  # fmt: skip
    results: dict[Setting, dict[int, dict]] = {setting: {} for setting in settings}
    groups: dict[str, list[Path]] = {}
    start = time.time()
    with tempfile.TemporaryDirectory() as log_dir:
        for seed in args.seeds:
            for setting in settings:
                r, run_dir = run_one(config, setting, seed, log_dir, args.save_runs)
                results[setting][seed] = r
                groups.setdefault(setting.label, []).append(run_dir)
                print(f"  {setting.label} seed {seed}: t(0.9) {fmt(r['to_target'], '.0f')} s, final {r['final']:.3f}, "
                      f"|dlogp| {r['diff']:.4f}, {r['per_step']:.2f} s/step (load {load_average()})",
                      flush=True)  # fmt: skip
        print()
        report(results, args.seeds)
        print(f"\nload average after: {load_average()}; whole benchmark {time.time() - start:.0f} s")
        if args.plot_dir is not None:
            for path in plot(groups, args.plot_dir):
                print(f"plot: {path}")


if __name__ == "__main__":
    main()
