"""How often does SmolLM2's first turn on the products tool task call the tool with the right code?

    python research/experiments/tool_first_turns.py --temperatures 1.0 0.5

For each question wording (the env's own, and the earlier one that showed ``print(12 * 34)`` as an
example) and each temperature: the first turns of 64 training problems (the ``smollm2-tool``
preset's template, GEM's tool instruction appended by its wrapper, 48 tokens, base weights), and
how many hold a Python block, and how many print exactly the asked product (``print(a * b)``).
Prints a line each, and one answer to read. Not a test: about a minute a line on one core.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time

from tinker import types

from gemlab import Trainer, make_config
from gemlab.env_variants import ProductsEnv
from gemlab.envs import make_envs
from gemlab.episodes import sampling_params

WORDINGS = {
    "the env's": ProductsEnv.QUESTION,
    "with print(12 * 34) shown": (
        "What is {a} * {b}? Do not work it out yourself: write one line of Python that prints it, in a "
        "```python block, "
        "for example\n```python\nprint(12 * 34)\n```\nWhen its result comes back, give that number as \\boxed{{N}}."
    ),
}


async def first_turns(trainer: Trainer, temperature: float, count: int) -> tuple[int, int, str]:
    """(answers with a block, answers printing the asked product, the first answer) at ``temperature``."""
    config, tokenizer = trainer.config, trainer.tokenizer
    sampler = await trainer.training_client.save_weights_and_get_sampling_client()
    envs = make_envs(config.env_id, count, seed=7, env_wrappers=config.env_wrappers, tokenizer=tokenizer)
    observations = [env.reset(seed=1000 + i)[0] for i, env in enumerate(envs)]
    pairs = [env.unwrapped.pair for env in envs]
    responses = await asyncio.gather(
        *[
            sampler.sample(
                prompt=types.ModelInput.from_ints(trainer.template.render(o, tokenizer)),
                num_samples=1,
                sampling_params=sampling_params(tokenizer, 48, temperature, 100 + i),
            )
            for i, o in enumerate(observations)
        ]
    )
    texts = [tokenizer.decode(r.sequences[0].tokens) for r in responses]
    blocks = sum("```python" in text for text in texts)
    right = sum(
        bool(re.search(rf"print\(\s*{a}\s*\*\s*{b}\s*\)", text)) for text, (a, b) in zip(texts, pairs, strict=True)
    )
    return blocks, right, texts[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temperatures", type=float, nargs="+", default=[1.0, 0.5])
    parser.add_argument("--problems", type=int, default=64)
    args = parser.parse_args()
    trainer = Trainer(make_config("smollm2-tool", log_dir="/tmp/tool_first_turns", save_every=0), progress=False)
    try:
        for name, wording in WORDINGS.items():
            ProductsEnv.QUESTION = wording
            for temperature in args.temperatures:
                start = time.time()
                blocks, right, example = trainer.run_on_loop(first_turns(trainer, temperature, args.problems))
                print(
                    f"{name:28} T={temperature}: a block in {blocks}/{args.problems}, the asked product in "
                    f"{right}/{args.problems} ({time.time() - start:.0f} s)"
                )
                print(f"    e.g. {example[:100]!r}", flush=True)
    finally:
        trainer.close()


if __name__ == "__main__":
    main()
