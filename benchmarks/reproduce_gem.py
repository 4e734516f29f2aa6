"""Regenerate ``data/figures``: the GEM paper's discount-factor study and algorithm comparison at
laptop scale (gemlab/studies/definitions.py defines the runs; notebook 08 plots them).

    python benchmarks/reproduce_gem.py                       # both studies, 3 seeds, 40 steps each
    python benchmarks/reproduce_gem.py --study gamma --seeds 0 --steps 10 --root /tmp/try

Shows one progress bar over all steps, then prints each study's table (first-10 vs last-10
steps, mean over seeds and the spread of the last-10 mean) and its wall time, and draws
``<root>/<study>.png``. Interrupted? Run
the same command again: finished runs are skipped, unfinished ones resume from their last
checkpoint (every 10 steps). Not a test: timings depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import sys
import time

import matplotlib
import pandas as pd

from gemlab.plots import save_figure
from gemlab.run_folder import RunFolderError
from gemlab.studies.definitions import SEEDS, STEPS, STUDIES, study_configs
from gemlab.studies.figures import algorithms_figure, gamma_figure, summary_table
from gemlab.studies.runner import run_configs

FIGURES = {"gamma": gamma_figure, "algorithms": algorithms_figure}

TABLE_METRICS = {
    "gamma": ("sampler/success_rate", "sampler/num_turns_per_won_episode"),
    "algorithms": ("sampler/success_rate",),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", choices=STUDIES, action="append", help="a study to run (repeatable; default: both)")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--steps", type=int, default=STEPS, help=f"steps per run (default {STEPS})")
    parser.add_argument("--root", default="data/figures", help="where the study folders go (default data/figures)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        print("reproduce_gem: --steps must be a positive integer", file=sys.stderr)
        return 2
    matplotlib.use("Agg")
    pd.set_option("display.width", 200)
    for study in args.study or STUDIES:
        start = time.time()
        try:
            run_configs(study_configs(study, args.root, steps=args.steps, seeds=args.seeds))
        except RunFolderError as error:  # another runner holds a run, or a folder is not usable
            print(f"reproduce_gem: {error}", file=sys.stderr)
            return 1
        print(f"\n{study}: {time.time() - start:.0f} s")
        print(summary_table(f"{args.root}/{study}", TABLE_METRICS[study]).round(3).to_string())
        print(f"figure: {save_figure(FIGURES[study](f'{args.root}/{study}'), f'{args.root}/{study}.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
