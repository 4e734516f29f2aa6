"""Does sampling ahead of the learner pay? The ``laptop`` preset synchronous (``max_staleness=0``,
GEM's loop) against ``max_staleness`` 1 and 2, several seeds, through gemlab's real trainer and
the local backend (sampling and training on separate workers).

    python benchmarks/bench_async.py                                   # seeds 0 1 2, staleness 0 1 2
    python benchmarks/bench_async.py --seeds 0 --staleness 0 1 max_steps=40
    python benchmarks/bench_async.py --plot-dir docs/figures --save-runs data/async-runs

Per run it prints the wall-clock time (from the first step's start: model loading is left out)
at which the success rate (fraction of episodes won), averaged over the last 5 steps, first
reaches 0.9 (``-`` if never; also 0.8, for runs that stop short of 0.9), the final success rate (last 10 steps), the mean |sampler -
learner| logprob difference on the trained tokens, the mean staleness and the seconds per step;
then a table per setting with the time to 0.9 relative to the synchronous run of the same seed. Runs are interleaved (seed 0 at every setting, then seed
1, ...) so a change in the machine's load hits every setting alike; the load average is printed
before and after. ``--plot-dir`` writes ``async-reward-vs-wall-clock.png`` and
``async-logprob-diff.png``. Not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import chz
import numpy as np

from gemlab.config import Config, config_from_argv
from gemlab.run_folder import export_run, read_run
from gemlab.trainer import Trainer

TARGET, LOWER, WINDOW, FINAL = 0.9, 0.8, 5, 10  # LOWER: a second threshold, for runs that stop short of 0.9


def elapsed(history: list[dict[str, float]], i: int) -> float:
    """Seconds from the first step's start (model loading left out) to the end of step ``i``."""
    return float(history[i]["time/train_end"] - history[0]["time/sample_start"])


def time_to_target(history: list[dict[str, float]], target: float = TARGET) -> float | None:
    """Wall-clock seconds at the first step where the ``WINDOW``-step average success reaches ``target``."""
    success = np.asarray([row["sampler/success_rate"] for row in history])
    for i in range(WINDOW - 1, len(success)):
        if success[i - WINDOW + 1 : i + 1].mean() >= target:
            return elapsed(history, i)
    return None


def run_one(base: Config, seed: int, staleness: int, log_dir: str, save_to: Path | None) -> dict[str, float | None]:
    name = f"staleness{staleness}-seed{seed}"
    config = chz.replace(base, seed=seed, max_staleness=staleness, log_dir=log_dir, run_name=name, save_every=-1)
    trainer = Trainer(config, progress=False)
    try:
        history = trainer.run()
    finally:
        trainer.close()
    if save_to is not None:
        export_run(trainer.run_dir, save_to / name, config=config)
    return summarize(history)


def summarize(history: list[dict[str, float]]) -> dict[str, float | None]:
    """Time to 0.9, final success, logprob difference, staleness and pace of one run's metrics."""
    return {
        "to_target": time_to_target(history),
        "to_lower": time_to_target(history, LOWER),
        "final": float(np.mean([row["sampler/success_rate"] for row in history[-FINAL:]])),
        "diff": float(np.mean([row["train/logprob_diff_abs"] for row in history])),
        "staleness": float(np.mean([row["async/staleness_mean"] for row in history])),
        "per_step": elapsed(history, len(history) - 1) / len(history),
        "wall": elapsed(history, len(history) - 1),
    }


def fmt(value: float | None, spec: str) -> str:
    """``value`` formatted, or ``-`` (as wide) when there is none."""
    width = int(spec.split(".")[0] or 0)
    return "-".rjust(width) if value is None else format(value, spec)


def table(results: dict[int, dict[int, dict]], all_seeds: list[int]) -> str:
    """One block per staleness: per seed and mean, with time to 0.9 relative to staleness 0."""
    head = f"{'k':>3} {'seed':>5} {'t(0.9) s':>9} {'x sync':>7} {'t(0.8) s':>9} {'x sync':>7} {'final':>6} {'|dlogp|':>8} {'stale':>6} {'s/step':>7} {'wall s':>7}"
    lines = [head]
    def ratio(r: dict, sync: dict | None, key: str) -> float | None:
        return r[key] / sync[key] if sync and r[key] and sync[key] else None

    def mean_of(values: list) -> float | None:
        values = [v for v in values if v is not None]
        return float(np.mean(values)) if values else None

    for k, rows in results.items():
        ratios: dict[str, list] = {"to_target": [], "to_lower": []}
        seeds = [seed for seed in all_seeds if seed in rows]
        for seed in seeds:
            r, sync = rows[seed], results.get(0, {}).get(seed)
            for key in ratios:
                ratios[key].append(ratio(r, sync, key))
            lines.append(
                f"{k:>3} {seed:>5} {fmt(r['to_target'], '9.0f')} {fmt(ratios['to_target'][-1], '7.2f')} "
                f"{fmt(r['to_lower'], '9.0f')} {fmt(ratios['to_lower'][-1], '7.2f')} {r['final']:>6.3f} "
                f"{r['diff']:>8.4f} {r['staleness']:>6.2f} {r['per_step']:>7.2f} {r['wall']:>7.0f}"
            )
        reached = [rows[s]["to_target"] for s in seeds if rows[s]["to_target"] is not None]
        mean = lambda key: float(np.mean([rows[s][key] for s in seeds]))  # noqa: E731
        lines.append(
            f"{k:>3} {'mean':>5} {fmt(mean_of(reached), '9.0f')} {fmt(mean_of(ratios['to_target']), '7.2f')} "
            f"{fmt(mean_of([rows[s]['to_lower'] for s in seeds]), '9.0f')} {fmt(mean_of(ratios['to_lower']), '7.2f')} "
            f"{mean('final'):>6.3f} {mean('diff'):>8.4f} {mean('staleness'):>6.2f} {mean('per_step'):>7.2f} "
            f"{mean('wall'):>7.0f}   ({len(reached)}/{len(seeds)} reached 0.9)"
        )
    return "\n".join(lines)


def plot(groups: dict[str, list[Path]], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    from gemlab import plots

    ax = plots.plot_vs_wall_clock(groups, smoothing=WINDOW, title="Success rate against wall-clock time")
    ax.axhline(TARGET, color="grey", ls="--", lw=1)
    ax.set_ylim(0, 1)
    first = plots.save_figure(ax, folder / "async-reward-vs-wall-clock.png")
    ax = plots.plot_seed_bands(groups, "train/logprob_diff_abs", smoothing=WINDOW, title="How off-policy: sampler vs learner logprob")
    second = plots.save_figure(ax, folder / "async-logprob-diff.png")
    return [first, second]


def report_saved(folder: Path, plot_dir: Path | None) -> None:
    """The table and plots of runs saved by ``--save-runs`` (folders ``staleness<k>-seed<s>``)."""
    results: dict[int, dict[int, dict]] = {}
    groups: dict[str, list[Path]] = {}
    for run in sorted(folder.glob("staleness*-seed*")):
        k, seed = (int(part) for part in run.name.removeprefix("staleness").split("-seed"))
        history = read_run(run).metrics.to_dict("records")
        results.setdefault(k, {})[seed] = summarize(history)
        groups.setdefault("synchronous" if k == 0 else f"max_staleness={k}", []).append(run)
    if not results:
        raise SystemExit(f"no runs named staleness<k>-seed<s> in {folder}")
    seeds = sorted(set.union(*(set(rows) for rows in results.values())))
    print(table(dict(sorted(results.items())), seeds))
    if plot_dir is not None:
        for path in plot(groups, plot_dir):
            print(f"plot: {path}")


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--save-runs", type=Path, default=None, help="keep each run's metrics and config in DIR/staleness<k>-seed<s>")
    parser.add_argument("--plot-dir", type=Path, default=None, help="write the reward-vs-wall-clock and logprob-difference PNGs here")
    parser.add_argument("--from-runs", type=Path, default=None, help="train nothing: tabulate and plot the runs saved in DIR by --save-runs")
    parser.add_argument("overrides", nargs="*", help="Config fields as key=value, applied on top of the laptop preset")
    args = parser.parse_args()
    if args.from_runs is not None:
        report_saved(args.from_runs, args.plot_dir)
        return
    os.environ.setdefault("GEMLAB_THREADS", "1")

    config = config_from_argv(["preset=laptop", *args.overrides])
    print(f"laptop preset: steps={config.max_steps} batch={config.batch_size} num_env={config.num_env} "
          f"lr={config.learning_rate} loss={config.loss_fn} threads per worker={os.environ['GEMLAB_THREADS']} "
          f"cores={os.cpu_count()}; load average before: {load_average()}", flush=True)  # fmt: skip
    results: dict[int, dict[int, dict]] = {k: {} for k in args.staleness}
    groups: dict[str, list[Path]] = {}
    start = time.time()
    with tempfile.TemporaryDirectory() as log_dir:
        for seed in args.seeds:
            for k in args.staleness:
                results[k][seed] = r = run_one(config, seed, k, log_dir, args.save_runs)
                label = "synchronous" if k == 0 else f"max_staleness={k}"
                groups.setdefault(label, []).append(Path(log_dir) / f"staleness{k}-seed{seed}")
                print(f"  k={k} seed {seed}: t(0.9) {fmt(r['to_target'], '.0f')} s, final {r['final']:.3f}, "
                      f"|dlogp| {r['diff']:.4f}, {r['per_step']:.2f} s/step (load {load_average()})", flush=True)  # fmt: skip
        print()
        print(table(results, args.seeds))
        print(f"\nload average after: {load_average()}; whole benchmark {time.time() - start:.0f} s")
        if args.plot_dir is not None:
            for path in plot(groups, args.plot_dir):
                print(f"plot: {path}")


if __name__ == "__main__":
    main()
