"""Trainer step times on an accelerator (CUDA unless told otherwise): a Qwen3-class model that sits
in the Hugging Face cache, trained by its own name, and ``preset=smollm2``.

    python benchmarks/bench_device.py                                  # CUDA, both models, 4 RL steps each
    python benchmarks/bench_device.py --models qwen3 --steps 2 --layers 1 --device cpu   # a slow check on a CPU

The Qwen3-class model is random-init: Qwen3-0.6B's widths (hidden 1024, 16 query and 8 key/value
heads of 128, MLP 3072) with ``--layers`` layers, and SmolLM2's tokenizer (the tiny model's when
SmolLM2 is not installed). It is written into a temporary hub cache as ``gemlab-bench/Qwen3-random``
(no download; the user's own cache is neither read nor written for it) and loads by that name, as a
downloaded ``Qwen/Qwen3-0.6B`` would. Its rewards stay 0 (random weights): only the times count.
SmolLM2 runs the ``smollm2`` preset (its SFT warm-up timed apart). Per model it prints the median
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

import torch

from gemlab.config import config_from_argv
from gemlab.local.models import DEVICE_ENV, SMOLLM2, choose_device, load_tokenizer
from gemlab.trainer import Trainer

QWEN3_NAME = "gemlab-bench/Qwen3-random"


def qwen3_tokenizer() -> object:
    """SmolLM2's tokenizer (a real 49k BPE vocabulary), else the tiny model's."""
    try:
        return load_tokenizer(SMOLLM2)
    except FileNotFoundError:
        from gemlab.tiny.model import load_tiny_tokenizer

        return load_tiny_tokenizer()


@contextlib.contextmanager
def qwen3_in_a_hub_cache(layers: int) -> Iterator[str]:
    """A random Qwen3 of ``layers`` layers in a temporary hub cache (``$HF_HUB_CACHE`` points there
    inside the block); yields its name."""
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a bar for writing one shard is noise

    tokenizer = qwen3_tokenizer()
    previous = os.environ.get("HF_HUB_CACHE")
    with tempfile.TemporaryDirectory(prefix="gemlab-hub-") as cache:
        commit = "0" * 40
        repo = Path(cache) / f"models--{QWEN3_NAME.replace('/', '--')}"
        torch.manual_seed(0)
        config = Qwen3Config(
            vocab_size=len(tokenizer), hidden_size=1024, intermediate_size=3072, num_hidden_layers=layers,
            num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=4096,
            tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
        )
        Qwen3ForCausalLM(config).save_pretrained(repo / "snapshots" / commit)
        tokenizer.save_pretrained(repo / "snapshots" / commit)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
        os.environ["HF_HUB_CACHE"] = cache
        try:
            yield QWEN3_NAME
        finally:
            if previous is None:
                os.environ.pop("HF_HUB_CACHE", None)
            else:
                os.environ["HF_HUB_CACHE"] = previous


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
    parser.add_argument("--models", nargs="+", choices=["qwen3", "smollm2"], default=["qwen3", "smollm2"])
    parser.add_argument("--steps", type=int, default=4, help="RL steps per model (at least 2: the first is not counted)")
    parser.add_argument("--layers", type=int, default=4, help="layers of the random Qwen3-class model")
    args = parser.parse_args()
    if args.steps < 1 or args.layers < 1:
        parser.error("--steps and --layers must be at least 1")
    try:
        device = choose_device(args.device)
    except ValueError as error:
        parser.error(str(error))
    os.environ[DEVICE_ENV] = str(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    print(f"device {name}, torch {torch.__version__}, load {os.getloadavg()[0]:.1f}", flush=True)
    for model in args.models:
        if model == "qwen3":
            with qwen3_in_a_hub_cache(args.layers) as qwen3:
                result = time_steps(["preset=laptop", f"model_name={qwen3}", "max_tokens=16", "num_env=16", "batch_size=32"], args.steps)
            label = f"{qwen3} ({args.layers} layers)"
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
            f"(sample {result['sample']:.2f} s, train {result['train']:.2f} s; first step {result['first_step_s']:.2f} s); "
            f"|sampler - learner logprob| {result['logprob_diff']:.1e} (a step's mean, the largest); rollout success {result['success']}; "
            f"load {os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
