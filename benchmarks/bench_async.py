"""Does sampling ahead of the learner pay? The ``laptop`` preset synchronous (``max_staleness=0``,
GEM's loop) against ``max_staleness`` 1 and 2, several seeds, through gemlab's real trainer and
the local backend (sampling and training on separate workers).

    python benchmarks/bench_async.py                                   # seeds 0 1 2, staleness 0 1 2
    python benchmarks/bench_async.py --seeds 0 --staleness 0 1 max_steps=40
    python benchmarks/bench_async.py --plot-dir docs/figures --save-runs data/async-runs

Per run it prints the wall-clock time (from the first step's start: model loading is left out)
at which the success rate (fraction of episodes won), averaged over the last 5 steps, first
reaches 0.9 (``-`` if never), the final success rate (last 10 steps), the mean |sampler -
learner| logprob difference on the trained tokens, the mean staleness and the seconds per step;
then a table per setting with the time to 0.9 relative to the synchronous run of the same seed. Runs are interleaved (seed 0 at every setting, then seed
1, ...) so a change in the machine's load hits every setting alike; the load average is printed
before and after. ``--plot-dir`` writes ``async-reward-vs-wall-clock.png`` and
``async-logprob-diff.png``. Not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import chz
import numpy as np

from gemlab.config import Config, config_from_argv
from gemlab.training import Trainer

TARGET, WINDOW, FINAL = 0.9, 5, 10


def elapsed(history: list[dict[str, float]], i: int) -> float:
    """Seconds from the first step's start (model loading left out) to the end of step ``i``."""
    return float(history[i]["time/train_end"] - history[0]["time/sample_start"])


def time_to_target(history: list[dict[str, float]]) -> float | None:
    """Wall-clock seconds at the first step where the ``WINDOW``-step average success reaches ``TARGET``."""
    success = np.asarray([row["sampler/success_rate"] for row in history])
    for i in range(WINDOW - 1, len(success)):
        if success[i - WINDOW + 1 : i + 1].mean() >= TARGET:
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
        target = save_to / name
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        shutil.copy(trainer.run_dir / "metrics.jsonl", target / "metrics.jsonl")
        (target / "config.json").write_text(json.dumps(chz.asdict(config), indent=2))
    return {
        "to_target": time_to_target(history),
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


def table(results: dict[int, dict[int, dict]], seeds: list[int]) -> str:
    """One block per staleness: per seed and mean, with time to 0.9 relative to staleness 0."""
    head = f"{'k':>3} {'seed':>5} {'t(0.9) s':>9} {'x sync':>7} {'final':>6} {'|dlogp|':>8} {'stale':>6} {'s/step':>7} {'wall s':>7}"
    lines = [head]
    for k, rows in results.items():
        ratios = []
        for seed in seeds:
            r, sync = rows[seed], results.get(0, {}).get(seed)
            ratio = r["to_target"] / sync["to_target"] if sync and r["to_target"] and sync["to_target"] else None
            if ratio is not None:
                ratios.append(ratio)
            lines.append(
                f"{k:>3} {seed:>5} {fmt(r['to_target'], '9.0f')} {fmt(ratio, '7.2f')} {r['final']:>6.3f} "
                f"{r['diff']:>8.4f} {r['staleness']:>6.2f} {r['per_step']:>7.2f} {r['wall']:>7.0f}"
            )
        reached = [rows[s]["to_target"] for s in seeds if rows[s]["to_target"] is not None]
        mean = lambda key: float(np.mean([rows[s][key] for s in seeds]))  # noqa: E731
        lines.append(
            f"{k:>3} {'mean':>5} {fmt(np.mean(reached) if reached else None, '9.0f')} "
            f"{fmt(np.mean(ratios) if ratios else None, '7.2f')} {mean('final'):>6.3f} {mean('diff'):>8.4f} "
            f"{mean('staleness'):>6.2f} {mean('per_step'):>7.2f} {mean('wall'):>7.0f}   ({len(reached)}/{len(seeds)} reached 0.9)"
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


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--staleness", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--save-runs", type=Path, default=None, help="keep each run's metrics and config in DIR/staleness<k>-seed<s>")
    parser.add_argument("--plot-dir", type=Path, default=None, help="write the reward-vs-wall-clock and logprob-difference PNGs here")
    parser.add_argument("overrides", nargs="*", help="Config fields as key=value, applied on top of the laptop preset")
    args = parser.parse_args()
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
