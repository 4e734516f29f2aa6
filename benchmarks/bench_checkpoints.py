"""What a checkpoint costs on the laptop preset: seconds per save_state, disk per checkpoint,
and both relative to a training step. Picks the default ``save_every`` (README, "Training from
the command line").

    python benchmarks/bench_checkpoints.py [--steps 10] [--saves 10]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from gemlab import Trainer, make_config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10, help="training steps to time")
    parser.add_argument("--saves", type=int, default=10, help="checkpoints to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as log_dir:
        trainer = Trainer(make_config("laptop", log_dir=log_dir, run_name="bench", save_every=0), progress=False)
        steps = [trainer.step()["time/step"] for _ in range(args.steps)]
        saves = []
        for index in range(args.saves):
            start = time.perf_counter()
            path = trainer.training_client.save_state(f"bench{index}").result().path
            saves.append(time.perf_counter() - start)
        folder = next(Path(log_dir).glob("bench/checkpoints/*/weights/bench0"))
        size = sum(f.stat().st_size for f in folder.iterdir())
        trainer.close()
    step, save = statistics.median(steps), statistics.median(saves)
    print(f"training step: median {step:.3f} s over {len(steps)} steps")
    print(
        f"save_state:    median {save * 1000:.1f} ms over {len(saves)} saves ({path.split('/')[-1]}), "
        f"{size / 1e3:.0f} kB each"
    )
    for every in (1, 5, 10):
        print(
            f"save_every={every:<3} costs {save / (every * step):6.2%} of training time and "
            f"{size * 100 / every / 1e6:.1f} MB per 100 steps"
        )


if __name__ == "__main__":
    main()
