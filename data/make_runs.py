"""Regenerate ``data/runs/``: the precomputed training runs that notebook 05 plots.

One laptop-recipe run per (normalization, seed); each run folder keeps only ``metrics.jsonl``,
``config.json`` and, when the recipe has a warm-up, ``warmup.jsonl`` (checkpoints are dropped).

    python data/make_runs.py                                   # rebn and none, seeds 0 1 2
    python data/make_runs.py --methods rebn --seeds 3 max_steps=50

Extra ``key=value`` arguments override the laptop preset (any ``gemlab.config.Config`` field).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import chz

from gemlab import Trainer
from gemlab.config import config_from_argv

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "data" / "runs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=["rebn", "none"], help="values of config.normalization")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=OUT)
    argv = sys.argv[1:] if argv is None else argv
    overrides = [arg for arg in argv if "=" in arg and not arg.startswith("-")]
    args = parser.parse_args([arg for arg in argv if arg not in overrides])
    for method in args.methods:
        for seed in args.seeds:
            name = f"{method}-seed{seed}"
            with tempfile.TemporaryDirectory() as tmp:
                config = config_from_argv(["preset=laptop", *overrides, f"seed={seed}", f"normalization={method}", f"log_dir={tmp}", f"run_name={name}"])
                start = time.time()
                trainer = Trainer(config, progress=False)
                trainer.run()
                trainer.close()
                target = args.out / name
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir(parents=True)
                for file in ("metrics.jsonl", "warmup.jsonl"):
                    if (trainer.run_dir / file).exists():
                        shutil.copy(trainer.run_dir / file, target / file)
                log_dir = os.path.relpath(args.out.resolve(), ROOT)  # relative to the repository, e.g. data/runs
                (target / "config.json").write_text(json.dumps(chz.asdict(chz.replace(config, log_dir=log_dir)), indent=2))
                last = trainer.history[-1]
                print(f"{name}: {len(trainer.history)} steps in {time.time() - start:.0f} s, last success rate {last['sampler/success_rate']:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
