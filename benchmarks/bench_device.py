"""Trainer step times on an accelerator (CUDA unless told otherwise): a Qwen3-class model that sits
in the Hugging Face cache, trained by its own name, ``preset=smollm2``, and SmolLM2's shape on the
single-turn recipe.

    python benchmarks/bench_device.py                                  # CUDA, qwen3 and smollm2, 4 RL steps each
    python benchmarks/bench_device.py --models qwen3 --steps 2 --layers 1 --device cpu   # a slow check on a CPU
    python benchmarks/bench_device.py --models smollm2-shape --shape-from DIR           # where SmolLM2's weights are
    not installed

The Qwen3-class model is random-init: Qwen3-0.6B's widths (hidden 1024, 16 query and 8 key/value
heads of 128, MLP 3072) with ``--layers`` layers, and SmolLM2's tokenizer (the tiny model's when
SmolLM2 is not installed). It is written into a temporary hub cache as ``gemlab-bench/Qwen3-random``
(no download; the user's own cache is neither read nor written for it) and loads by that name, as a
downloaded ``Qwen/Qwen3-0.6B`` would. Its rewards stay 0 (random weights): only the times count.
SmolLM2 runs the ``smollm2`` preset (its SFT warm-up timed apart). ``smollm2-shape`` is a random
model of SmolLM2-135M's architecture (the config and tokenizer in ``--shape-from``, a folder that
``--save-shape DIR`` writes from the installed SmolLM2), for a machine without its weights (a GPU
machine that cannot download): it runs the single-turn recipe of issue 29 (``rg:sums-1digit``,
``template=chat``, 64 episodes in groups of 8, GRPO, 16 tokens); random weights never stop early, so
its sampling time is the upper bound of 16 tokens per answer. Per model it prints the median
sample / train / step seconds of the RL steps after the first (the first pays for warming up CUDA)
and the sampler/learner logprob difference (the largest step mean), which should stay near float32
rounding.
Not a test: on a CPU it takes minutes a step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from gemlab.config import config_from_argv
from gemlab.doctor import device_name
from gemlab.trainer import Trainer
from tinker_emulator.models import DEVICE_ENV, SMOLLM2, choose_device, load_tokenizer, model_source

QWEN3_NAME = "gemlab-bench/Qwen3-random"
SHAPE_NAME = "gemlab-bench/SmolLM2-random"
SINGLE_TURN = [  # a single-turn SmolLM2 step of 64 episodes (step times only; preset=smollm2 is the learning recipe)
    "preset=smollm2", "env_id=rg:sums-1digit", "template=chat", "max_tokens=16", "num_env=64", "batch_size=64",
    "group_size=8", "advantage=grpo", "learning_rate=5e-4", "warmup_steps=0",
]


def qwen3_tokenizer() -> object:
    """SmolLM2's tokenizer (a real 49k BPE vocabulary), else the tiny model's."""
    try:
        return load_tokenizer(SMOLLM2)
    except FileNotFoundError:
        from gemlab.tiny.model import load_tiny_tokenizer

        return load_tiny_tokenizer()


@contextlib.contextmanager
def in_a_hub_cache(name: str, model: Any, tokenizer: Any) -> Iterator[str]:
    """``model`` and ``tokenizer`` saved as ``name`` in a temporary hub cache (``$HF_HUB_CACHE``
    points there inside the block); yields ``name``."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar for writing one shard is noise
    previous = os.environ.get("HF_HUB_CACHE")
    with tempfile.TemporaryDirectory(prefix="gemlab-hub-") as cache:
        commit = "0" * 40
        repo = Path(cache) / f"models--{name.replace('/', '--')}"
        model.save_pretrained(repo / "snapshots" / commit)
        tokenizer.save_pretrained(repo / "snapshots" / commit)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
        os.environ["HF_HUB_CACHE"] = cache
        try:
            yield name
        finally:
            if previous is None:
                os.environ.pop("HF_HUB_CACHE", None)
            else:
                os.environ["HF_HUB_CACHE"] = previous


def random_qwen3(layers: int) -> tuple[Any, Any]:
    """A random Qwen3 of ``layers`` layers at Qwen3-0.6B's widths, and its tokenizer."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = qwen3_tokenizer()
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=1024, intermediate_size=3072, num_hidden_layers=layers,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
        tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
    )
    return Qwen3ForCausalLM(config), tokenizer


def random_smollm2(folder: Path) -> tuple[Any, Any]:
    """A random model of SmolLM2-135M's architecture from the config and tokenizer in ``folder``."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder)), AutoTokenizer.from_pretrained(folder)


def save_shape(folder: Path) -> None:
    """SmolLM2's config and tokenizer (from its installed weights) into ``folder``, for ``--shape-from``."""
    from transformers import AutoConfig

    source, options = model_source(SMOLLM2)
    AutoConfig.from_pretrained(source, **options).save_pretrained(folder)
    load_tokenizer(SMOLLM2).save_pretrained(folder)


def time_steps(overrides: list[str], steps: int) -> dict:
    """Build a Trainer from ``overrides``, warm it up (if its preset does) and run ``steps`` RL steps."""
    with tempfile.TemporaryDirectory(prefix="gemlab-bench-") as log_dir:
        start = time.time()
        trainer = Trainer(config_from_argv([*overrides, f"max_steps={steps}", f"log_dir={log_dir}"]), progress=False)
        loaded = time.time() - start
        start = time.time()
        if trainer.config.warmup_steps:
            trainer.warmup()
        warmup = time.time() - start
        rows = [trainer.step() for _ in range(steps)]
        parameters = sum(p.numel() for p in trainer.training_client._model.model.parameters())
        trainer.close()
    later = rows[1:] or rows
    return {
        "parameters": parameters,
        "load_s": loaded,
        "warmup_s": warmup,
        **{key: statistics.median(r[f"time/{key}"] for r in later) for key in ("sample", "train", "step")},
        "first_step_s": rows[0]["time/step"],
        "logprob_diff": max(r.get("train/logprob_diff_abs", float("nan")) for r in rows),
        "success": [r["sampler/success_rate"] for r in rows],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N, mps or cpu (default cuda)")
    parser.add_argument(
        "--models", nargs="+", choices=["qwen3", "smollm2", "smollm2-shape"], default=["qwen3", "smollm2"]
    )
    parser.add_argument(
        "--steps", type=int, default=4, help="RL steps per model (at least 2: the first is not counted)"
    )
    parser.add_argument("--layers", type=int, default=4, help="layers of the random Qwen3-class model")
    parser.add_argument(
        "--shape-from", type=Path, help="for smollm2-shape: a folder with SmolLM2's config.json and tokenizer"
    )
    parser.add_argument(
        "--save-shape", type=Path, metavar="DIR", help="write SmolLM2's config and tokenizer to DIR, then exit"
    )
    args = parser.parse_args()
    if args.save_shape:
        save_shape(args.save_shape)
        print(f"wrote SmolLM2's config and tokenizer to {args.save_shape}")
        return
    if "smollm2-shape" in args.models and not (args.shape_from and (args.shape_from / "config.json").is_file()):
        parser.error(
            "smollm2-shape needs --shape-from DIR, a folder with config.json and the tokenizer (--save-shape "
            "DIR writes one)"
        )
    if args.steps < 1 or args.layers < 1:
        parser.error("--steps and --layers must be at least 1")
    try:
        device = choose_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    os.environ[DEVICE_ENV] = str(device)
    print(f"device {device_name(device)}, torch {torch.__version__}, load {os.getloadavg()[0]:.1f}", flush=True)
    for model in args.models:
        if model == "qwen3":
            with in_a_hub_cache(QWEN3_NAME, *random_qwen3(args.layers)) as qwen3:
                result = time_steps(
                    ["preset=laptop", f"model_name={qwen3}", "max_tokens=16", "num_env=16", "batch_size=32"], args.steps
                )
            label = f"{qwen3} ({args.layers} layers)"
        elif model == "smollm2-shape":
            with in_a_hub_cache(SHAPE_NAME, *random_smollm2(args.shape_from)) as shape:
                result = time_steps([*SINGLE_TURN, f"model_name={shape}"], args.steps)
            label = f"{shape} (single-turn recipe: {' '.join(SINGLE_TURN[1:])})"
        else:
            try:
                result = time_steps(["preset=smollm2"], args.steps)
            except FileNotFoundError as error:
                print(f"{SMOLLM2}: skipped ({error})")
                continue
            label = SMOLLM2
        print(
            f"{label}: {result['parameters'] / 1e6:.0f}M parameters, loaded in {result['load_s']:.1f} s, "
            f"warm-up {result['warmup_s']:.1f} s; RL step median {result['step']:.2f} s "
            f"(sample {result['sample']:.2f} s, train {result['train']:.2f} s; first step "
            f"{result['first_step_s']:.2f} s); "
            f"|sampler - learner logprob| {result['logprob_diff']:.1e} (a step's mean, the largest); "
            f"rollout success {result['success']}; "
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
