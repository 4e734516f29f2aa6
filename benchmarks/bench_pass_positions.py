"""forward_backward on one real multi-turn batch at several training-pass sizes, interleaved in one
process: what ``tinker_emulator.scoring.MAX_PASS_POSITIONS`` buys (the logits are computed 341
positions at a time whatever the pass holds).

    python benchmarks/bench_pass_positions.py [--sizes 341 1024 2048] [--repeats 2] [preset=smollm2-tool ...]

The batch is what the preset's first step (after its warm-up) sends to its first forward_backward;
then each size runs ``--repeats`` times in turn, after a warm-up call. Prints each run's wall and
CPU seconds and the minimum per size, with the CPU and the load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from typing import Any

from gemlab import Trainer, make_config
from gemlab.doctor import cpu_name
from tinker_emulator import scoring


def one_step_of_datums(overrides: list[str]) -> tuple[Any, list[Any], str, dict[str, Any]]:
    """The Trainer of ``overrides`` and the datums, loss and its config of its first step."""
    options = dict(arg.split("=", 1) for arg in overrides)
    preset = options.pop("preset", "smollm2-tool")
    config = make_config(
        preset, eval_every=0, max_steps=1, save_every=0, log_dir=tempfile.mkdtemp(prefix="gemlab-bench-"), **options
    )
    trainer = Trainer(config, progress=False)
    client = trainer.training_client
    sent: list[Any] = []
    forward_backward = client.forward_backward

    def keep(data: list[Any], loss_fn: str, **kwargs: Any) -> Any:
        sent.append((list(data), loss_fn, kwargs))
        return forward_backward(data, loss_fn, **kwargs)

    client.forward_backward = keep
    trainer.step()
    client.forward_backward = forward_backward
    data, loss_fn, kwargs = sent[0]
    return trainer, data, loss_fn, kwargs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[341, 1024, 2048])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="preset=NAME and config fields, e.g. preset=smollm2-guess")
    args = parser.parse_args()
    print(
        f"CPU: {cpu_name()}, {os.cpu_count()} cores; uptime: "
        f"{subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"
    )
    trainer, data, loss_fn, kwargs = one_step_of_datums(args.overrides)
    client = trainer.training_client
    print(f"{len(data)} datums, {sum(d.model_input.length for d in data)} tokens, weights in {client._model.dtype}")
    client.forward_backward(data[:8], loss_fn, **kwargs).result()  # warm-up
    times: dict[int, list[float]] = {}
    for _ in range(args.repeats):
        for size in args.sizes:
            scoring.MAX_PASS_POSITIONS = size
            wall, cpu = time.perf_counter(), time.process_time()
            client.forward_backward(data, loss_fn, **kwargs).result()
            times.setdefault(size, []).append(time.perf_counter() - wall)
            print(
                f"  {size:5d} positions a pass: {times[size][-1]:.1f} s wall, {time.process_time() - cpu:.1f} CPU s",
                flush=True,
            )
    print("min per size: " + ", ".join(f"{size}: {min(values):.1f} s" for size, values in times.items()))
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    trainer.close()


if __name__ == "__main__":
    main()
