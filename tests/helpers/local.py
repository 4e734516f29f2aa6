"""Helpers for the local-backend tests: prompts, datums, and a run's LoRA tensors."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from tinker import types

CHAT = "<|im_start|>user\nGuess my number between 1 and 10.<|im_end|>\n<|im_start|>assistant\n"


def rl_datum(
    prompt: Sequence[int], action: Sequence[int], sampler_logprobs: Sequence[float], advantage: float
) -> types.Datum:
    """Prompt + action shifted by one; only action tokens carry advantage (as GEM's example)."""
    tokens = list(prompt) + list(action)
    pad = len(prompt) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": torch.tensor(tokens[1:]),
            "logprobs": torch.tensor([0.0] * pad + list(sampler_logprobs)),
            "advantages": torch.tensor([0.0] * pad + [advantage] * len(action)),
        },
    )


def sft_datum(prompt: Sequence[int], answer: Sequence[int]) -> types.Datum:
    tokens = list(prompt) + list(answer)
    weights = [0.0] * (len(prompt) - 1) + [1.0] * len(answer)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": torch.tensor(tokens[1:]), "weights": torch.tensor(weights)},
    )


def nudge(training, prompt: Sequence[int], answer: Sequence[int] = (5, 6, 7), lr: float = 2e-2) -> None:
    """One supervised step, so LoRA's B matrices are no longer zero."""
    training.forward_backward([sft_datum(prompt, answer)], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=lr)).result()


def grads(training) -> list[torch.Tensor]:
    """The run's accumulated LoRA gradients (zeros where there are none)."""
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in training._params]


def weights(training) -> list[torch.Tensor]:
    return [p.detach().clone() for p in training._params]
