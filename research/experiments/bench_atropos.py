"""The tinker-atropos loop on a laptop: an Atropos environment (examples/atropos_guess_env.py,
atroposlib unmodified) collects multi-turn games through ``ManagedServer`` against gemlab's
``/generate``, and ``gemlab.atropos.loop.train`` trains ``gemlab/tiny-chat`` on them.

    python research/experiments/bench_atropos.py                              # seeds 0 1 2, 40 steps, max_staleness 1
    python research/experiments/bench_atropos.py --seeds 0 --steps 10 --staleness 0 --out research/data/atropos-runs

Per seed it prints the success rate over the first and the last 10 steps, the mean staleness and
|sampler - learner| logprob gap, and the seconds per step; then the paired difference (last 10 -
first 10) over seeds with a 95% bootstrap interval (``gemlab.studies.stats``). ``--out`` writes each
run's metrics as ``seed<N>.jsonl``. Needs ``pip install -e ".[atropos]"``. Not a test: timings depend
on the machine and its load (printed).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from gemlab.atropos.loop import train
from gemlab.config import make_config
from gemlab.doctor import cpu_name
from gemlab.openai_endpoint import BackgroundServer, SamplerSlot, create_app
from gemlab.studies.stats import paired_contrast
from tinker_emulator import TINY_CHAT, LocalServiceClient
from tinker_emulator.models import model_source

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "atropos_guess_env.py"
WINDOW = 10


def guess_env_module():
    spec = importlib.util.spec_from_file_location("atropos_guess_env", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(seed: int, steps: int, staleness: int, groups: int, group_size: int, learning_rate: float) -> list[dict]:
    """One run of the loop: a fresh LoRA on ``gemlab/tiny-chat``, the environment seeded with ``seed``."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    example = guess_env_module()
    with tempfile.TemporaryDirectory(prefix="gemlab-atropos-") as root:
        service = LocalServiceClient(device="cpu", root=root)
        training = service.create_lora_training_client(base_model=TINY_CHAT, rank=8, seed=seed).result()
        slot = SamplerSlot(training.save_weights_and_get_sampling_client().result())
        folder = str(model_source(TINY_CHAT)[0])
        config = make_config(
            "laptop", model_name=TINY_CHAT, advantage="grpo", group_size=group_size, batch_size=10_000,
            max_staleness=staleness, learning_rate=learning_rate, seed=seed,
        )  # fmt: skip
        with BackgroundServer(create_app(slot, model_name=TINY_CHAT)) as server:
            env = example.GuessNumberEnv(
                example.GuessConfig(group_size=group_size, use_wandb=False, tokenizer_name=folder, seed=seed),
                [
                    APIServerConfig(
                        model_name=TINY_CHAT,
                        base_url=server.url,
                        api_key="local",
                        server_type="sglang",
                        tokenizer_name=folder,
                        health_check=False,
                    )
                ],
            )

            async def loop() -> list[dict]:
                await env.setup()
                return await train(env, training, slot, config, steps=steps, groups_per_step=groups)

            return asyncio.run(loop())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--staleness", type=int, default=1, help="max_staleness (0: synchronous)")
    parser.add_argument("--groups", type=int, default=4, help="scored groups per step")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=2e-3)
    parser.add_argument("--out", type=Path, help="write each run's metrics here as seed<N>.jsonl")
    args = parser.parse_args()
    if args.steps < 2 * WINDOW:
        parser.error(f"--steps must be at least {2 * WINDOW} (first and last {WINDOW} steps are compared)")
    if args.staleness < 0 or args.groups < 1 or args.group_size < 2:
        parser.error("--staleness must be >= 0, --groups >= 1 and --group-size >= 2")
    print(f"{cpu_name()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}", flush=True)
    first, last = [], []
    for seed in args.seeds:
        rows = run(seed, args.steps, args.staleness, args.groups, args.group_size, args.learning_rate)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"seed{seed}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        success = np.array([r["sampler/success_rate"] for r in rows])
        first.append(success[:WINDOW].mean())
        last.append(success[-WINDOW:].mean())
        print(
            f"seed {seed}: success first {WINDOW} steps {first[-1]:.3f}, last {WINDOW} {last[-1]:.3f}; "
            f"staleness mean {np.mean([r['async/staleness_mean'] for r in rows]):.2f}, "
            f"|logprob gap| {np.mean([r['train/logprob_diff_abs'] for r in rows]):.4f}; "
            f"{np.median([r['time/step'] for r in rows]):.2f} s/step (median); load {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    if len(args.seeds) > 1:
        contrast = paired_contrast(last, first)
        print(
            f"last - first {WINDOW} steps over {len(args.seeds)} seeds: {contrast.difference:+.3f} "
            f"[{contrast.low:+.3f}, {contrast.high:+.3f}] (95% bootstrap), sign-flip p = {contrast.p:.3f}"
        )


if __name__ == "__main__":
    main()
