"""Throughput of gemlab's local backend: sampling (concurrent requests batched vs one at a time)
and forward_backward, for the tiny preset and SmolLM2-135M.

    python benchmarks/bench_local.py                 # both models
    python benchmarks/bench_local.py --models gemlab/tiny

Sampling uses ``stop=[]`` so every request generates exactly ``--max-tokens`` tokens, and counts
generated tokens only. forward_backward counts every input token of the batch (prompt and
action), and includes the optim_step that follows it. Each figure is the best of ``--repeats``
runs after one warm-up run. Not a test: figures depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import torch
from tinker import types

from gemlab.local import SMOLLM2, TINY, LocalServiceClient
from gemlab.local.models import smollm2_gguf

PROMPT = (
    "<|im_start|>user\nYou are playing language games. Make valid actions to win.\n"
    "Observation: I'm thinking of a number between 1 and 10. You have 4 turns to guess it.\n"
    "Please reason step by step, and put your final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
)


def best_of(repeats: int, fn) -> float:
    """Seconds of the fastest of ``repeats`` runs of ``fn``, after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_model(
    model: str, requests: int, serial_requests: int, max_tokens: int, batch: int, repeats: int
) -> dict[str, float]:
    service = LocalServiceClient(root=os.environ.get("GEMLAB_LOCAL_DIR", "/tmp/gemlab-bench"))
    training = service.create_lora_training_client(base_model=model, rank=32, seed=0).result()
    sampling = training.save_weights_and_get_sampling_client().result()
    prompt = training.get_tokenizer().encode(PROMPT)
    model_input = types.ModelInput.from_ints(prompt)

    def params(i: int) -> types.SamplingParams:
        return types.SamplingParams(max_tokens=max_tokens, stop=[], seed=i)

    async def concurrent() -> None:
        await asyncio.gather(*[sampling.sample_async(model_input, 1, params(i)) for i in range(requests)])

    def one_at_a_time() -> None:
        for i in range(serial_requests):
            sampling.sample(model_input, 1, params(i)).result()

    batched_s = best_of(repeats, lambda: asyncio.run(concurrent()))
    serial_s = best_of(repeats, one_at_a_time)

    response = sampling.sample(model_input, batch, params(0)).result()
    data = []
    for seq in response.sequences:
        tokens = prompt + seq.tokens
        pad = len(prompt) - 1
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": tokens[1:],
                    "logprobs": [0.0] * pad + list(seq.logprobs),
                    "advantages": [0.0] * pad + [1.0] * len(seq.tokens),
                },
            )
        )

    def train() -> None:
        training.forward_backward(data, "importance_sampling")
        training.optim_step(types.AdamParams(learning_rate=1e-5)).result()

    train_s = best_of(repeats, train)
    return {
        "prompt_tokens": len(prompt),
        "batched_tok_s": requests * max_tokens / batched_s,
        "serial_tok_s": serial_requests * max_tokens / serial_s,
        "train_tok_s": sum(d.model_input.length for d in data) / train_s,
        "train_s": train_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=[TINY, SMOLLM2])
    parser.add_argument("--requests", type=int, default=32, help="concurrent sampling requests")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs visible")
    print(f"{'model':38} {'batched tok/s':>14} {'one-at-a-time':>14} {'speed-up':>9} {'fwd_bwd tok/s':>14}")
    for model in args.models:
        if model == SMOLLM2:
            try:
                smollm2_gguf()
            except FileNotFoundError as exc:
                print(f"{model:38} skipped: {exc}")
                continue
        small = model == TINY
        figures = bench_model(
            model,
            requests=args.requests,
            serial_requests=args.requests if small else 4,
            max_tokens=64 if small else 32,
            batch=16,
            repeats=args.repeats,
        )
        speedup = figures["batched_tok_s"] / figures["serial_tok_s"]
        print(
            f"{model:38} {figures['batched_tok_s']:14.0f} {figures['serial_tok_s']:14.0f} {speedup:8.1f}x "
            f"{figures['train_tok_s']:14.0f}   (prompt {figures['prompt_tokens']} tokens, "
            f"fwd_bwd+optim of 16 sequences {figures['train_s']:.2f} s)"
        )


if __name__ == "__main__":
    main()
