"""Does the default local setup learn? The ``laptop`` preset, end to end through gemlab's real
trainer and the local backend, for several seeds; then the same runs with ReBN switched off.

    python benchmarks/bench_learning.py                      # seeds 0 1 2, ReBN then none
    python benchmarks/bench_learning.py --seeds 0 --no-baseline
    python benchmarks/bench_learning.py max_steps=150 learning_rate=3e-4   # any Config field

Per run it prints the success rate (episodes won: GEM's success reward on the last turn) averaged
over the first 10 and the last 10 steps, their difference, and the wall time (SFT warm-up
included). docs/laptop-recipe.md explains the preset and the numbers to expect. Not a test:
timings depend on the machine and its load (set ``GEMLAB_THREADS`` to pin the thread count).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import chz
import numpy as np

from gemlab.config import Config, config_from_argv
from gemlab.training import Trainer

WINDOW = 10


def run_one(base: Config, seed: int, normalization: str, log_dir: str) -> dict[str, float]:
    """One run of ``base`` with this seed and normalization; first/last-window success and wall time."""
    config = chz.replace(
        base, seed=seed, normalization=normalization, log_dir=log_dir, run_name=f"bench-{normalization}-seed{seed}"
    )
    start = time.time()
    trainer = Trainer(config, progress=False)
    try:
        history = trainer.run()
    finally:
        trainer.close()
    wall = time.time() - start
    success = [row["sampler/success_rate"] for row in history]
    return {
        "first": float(np.mean(success[:WINDOW])),
        "last": float(np.mean(success[-WINDOW:])),
        "wall": wall,
        "steps": len(success),
    }


def table(title: str, rows: dict[int, dict[str, float]]) -> str:
    lines = [title, f"{'seed':>6} {'first-10':>9} {'last-10':>9} {'gain':>7} {'wall (s)':>9}"]
    for seed, r in rows.items():
        lines.append(f"{seed:>6} {r['first']:>9.3f} {r['last']:>9.3f} {r['last'] - r['first']:>+7.3f} {r['wall']:>9.0f}")
    mean = {k: float(np.mean([r[k] for r in rows.values()])) for k in ("first", "last", "wall")}
    lines.append(f"{'mean':>6} {mean['first']:>9.3f} {mean['last']:>9.3f} {mean['last'] - mean['first']:>+7.3f} {mean['wall']:>9.0f}")
    improving = sum(r["last"] > r["first"] for r in rows.values())
    lines.append(f"seeds improving: {improving}/{len(rows)}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--no-baseline", action="store_true", help="skip the runs with normalization='none'")
    parser.add_argument("--log-dir", default=None, help="where runs are written (default: a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="Config fields as key=value, applied on top of the laptop preset")
    args = parser.parse_args()
    os.environ.setdefault("GEMLAB_THREADS", "2")

    config = config_from_argv(["preset=laptop", *args.overrides])
    print(f"laptop preset: env={config.env_id} model={config.model_name} rank={config.lora_rank} "
          f"batch={config.batch_size} num_env={config.num_env} lr={config.learning_rate} "
          f"warmup={config.warmup_steps}x{config.warmup_learning_rate} steps={config.max_steps} "
          f"gamma={config.gamma} threads={os.environ['GEMLAB_THREADS']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        log_dir = args.log_dir or tmp
        for normalization in ["rebn"] + ([] if args.no_baseline else ["none"]):
            rows = {}
            for seed in args.seeds:
                rows[seed] = run_one(config, seed, normalization, log_dir)
                r = rows[seed]
                print(f"  {normalization} seed {seed}: first-10 {r['first']:.3f} last-10 {r['last']:.3f} "
                      f"wall {r['wall']:.0f}s", flush=True)
            print()
            print(table(f"normalization={normalization!r} (success rate = fraction of episodes won)", rows))
            print(flush=True)


if __name__ == "__main__":
    main()
