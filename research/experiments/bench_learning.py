"""Does the default local setup learn? The ``laptop`` preset, end to end through gemlab's real
trainer and the local backend, for several seeds; then the same runs with ReBN switched off.

    python research/experiments/bench_learning.py                      # seeds 0 1 2, ReBN then none
    python research/experiments/bench_learning.py --seeds 0 --no-baseline
    python research/experiments/bench_learning.py max_steps=150 learning_rate=1e-3   # any Config field
    python research/experiments/bench_learning.py --save-runs data/runs --plot docs/figures/laptop-learning-curve.png

Per run it prints the success rate (the fraction of episodes won) averaged over the first 10 and
the last 10 steps, their difference, and the wall time (model loading included), then a table per
normalization. ``--save-runs`` keeps each run's ``metrics.jsonl`` and ``config.json`` (this is how
``data/runs``, which notebooks 05 and 06 plot, is made); ``--plot`` draws the success rate of
every group as a mean with a one-standard-deviation band over seeds. docs/laptop-recipe.md
explains the preset and the numbers to expect. Not a test: timings depend on the machine and its
load (``GEMLAB_THREADS`` pins the thread count; the default here is 2).
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
from gemlab.run_folder import export_run
from gemlab.trainer import Trainer

WINDOW = 10
LEGEND = {"rebn": "ReBN (GEM's default)", "none": "ReBN off (raw discounted returns)"}


def run_one(base: Config, seed: int, normalization: str, log_dir: str, save_to: Path | None) -> dict[str, float]:
    """One run of ``base`` with this seed and normalization; first/last-window success and wall time."""
    name = f"{normalization}-seed{seed}"
    config = chz.replace(base, seed=seed, advantage=normalization, log_dir=log_dir, run_name=name)
    start = time.time()
    trainer = Trainer(config, progress=False)
    try:
        history = trainer.run()
    finally:
        trainer.close()
    wall = time.time() - start
    if save_to is not None:
        saved = chz.replace(config, log_dir=os.path.relpath(save_to.resolve(), Path.cwd()))
        export_run(trainer.run_dir, save_to / name, config=saved)
    success = [row["sampler/success_rate"] for row in history]
    return {"first": float(np.mean(success[:WINDOW])), "last": float(np.mean(success[-WINDOW:])), "wall": wall}


def table(title: str, rows: dict[int, dict[str, float]]) -> str:
    """Per-seed and mean first-10 / last-10 success, gain and wall time, as aligned text."""
    lines = [title, f"{'seed':>6} {'first-10':>9} {'last-10':>9} {'gain':>7} {'wall (s)':>9}"]
    for seed, r in rows.items():
        lines.append(
            f"{seed:>6} {r['first']:>9.3f} {r['last']:>9.3f} {r['last'] - r['first']:>+7.3f} {r['wall']:>9.0f}"
        )
    mean = {k: float(np.mean([r[k] for r in rows.values()])) for k in ("first", "last", "wall")}
    lines.append(
        f"{'mean':>6} {mean['first']:>9.3f} {mean['last']:>9.3f} {mean['last'] - mean['first']:>+7.3f} "
        f"{mean['wall']:>9.0f}"
    )
    improving = sum(r["last"] > r["first"] for r in rows.values())
    lines.append(f"seeds improving: {improving}/{len(rows)}")
    return "\n".join(lines)


def plot(groups: dict[str, list[Path]], path: Path, title: str) -> None:
    """Success rate per group, mean and one-std band over seeds, written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    from gemlab import plots

    ax = plots.plot_seed_bands(groups, smoothing=5, title=title)
    ax.set_ylim(0, 1)
    plots.save_figure(ax, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--no-baseline", action="store_true", help="skip the runs with normalization='none'")
    parser.add_argument(
        "--save-runs",
        type=Path,
        default=None,
        help="keep each run's metrics and config in DIR/<normalization>-seed<seed>",
    )
    parser.add_argument(
        "--plot", type=Path, default=None, help="write the success-rate curves (mean and band over seeds) to this PNG"
    )
    parser.add_argument("overrides", nargs="*", help="Config fields as key=value, applied on top of the laptop preset")
    args = parser.parse_args()
    os.environ.setdefault("GEMLAB_THREADS", "2")

    config = config_from_argv(["preset=laptop", *args.overrides])
    print(f"laptop preset: env={config.env_id} model={config.model_name} rank={config.lora_rank} "
          f"batch={config.batch_size} num_env={config.num_env} lr={config.learning_rate} "
          f"warmup_steps={config.warmup_steps} steps={config.max_steps} gamma={config.gamma} "
          f"threads={os.environ['GEMLAB_THREADS']}", flush=True)
    groups: dict[str, list[Path]] = {}
    with tempfile.TemporaryDirectory() as log_dir:
        for normalization in ["rebn"] + ([] if args.no_baseline else ["none"]):
            rows = {}
            for seed in args.seeds:
                rows[seed] = r = run_one(config, seed, normalization, log_dir, args.save_runs)
                groups.setdefault(LEGEND.get(normalization, normalization), []).append(
                    Path(log_dir) / f"{normalization}-seed{seed}"
                )
                print(f"  {normalization} seed {seed}: first-10 {r['first']:.3f} last-10 {r['last']:.3f} "
                      f"wall {r['wall']:.0f}s", flush=True)
            print()
            print(table(f"normalization={normalization!r} (success rate = fraction of episodes won)", rows))
            print(flush=True)
        if args.plot is not None:
            plot(
                groups,
                args.plot,
                f"{config.env_id.split(':')[-1]}, {config.model_name}: success rate over {len(args.seeds)} seeds",
            )
            print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
