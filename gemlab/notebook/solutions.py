"""Reference solutions to the notebook exercises. Spoilers: try each exercise first!

Each function is written the plain way a learner might write it (not by calling gemlab's own
implementation), so that comparing the two in ``gemlab.notebook.exercises`` means something. When a
notebook's exercise stub is left unattempted, its check cell loads the matching function from
here so the rest of the notebook still runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import torch


# 00_backends ---------------------------------------------------------------------------------
def perplexity(logprobs: Sequence[float]) -> float:
    """``exp(-mean(logprobs))``: the average number of tokens the policy was choosing between."""
    return math.exp(-sum(logprobs) / len(logprobs))


# 01_templates --------------------------------------------------------------------------------
def chat_prompt(observation: str) -> str:
    """One user turn in the ChatML format of Qwen3 (and gemlab/tiny), ending where the assistant speaks."""
    return f"<|im_start|>user\n{observation}<|im_end|>\n<|im_start|>assistant\n"


# 02_episodes ---------------------------------------------------------------------------------
def binary_search_policy(observation: str) -> str:
    """Guess the middle of the numbers still possible, read off the game's instructions and hints."""
    match = re.search(r"between (\d+) and (\d+)", observation)
    if match is None:
        raise ValueError("the observation does not say between which numbers to guess")
    low, high = (int(x) for x in match.groups())
    for guess, hint in re.findall(r"you guessed (\d+), and the target number is (higher|lower)", observation):
        if hint == "higher":
            low = max(low, int(guess) + 1)
        else:
            high = min(high, int(guess) - 1)
    return f"\\boxed{{{(low + high) // 2}}}"


# 03_returns_and_rebn -------------------------------------------------------------------------
def discounted_returns(rewards: Sequence[float], gamma: float) -> list[float]:
    """``G_t = r_t + gamma * G_{t+1}``, computed backwards from the last turn."""
    returns = [0.0] * len(rewards)
    future = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        future = rewards[t] + gamma * future
        returns[t] = future
    return returns


def rebn(returns: Sequence[float]) -> list[float]:
    """``(G - mean) / (std + 1e-9)`` over the whole batch, with the unbiased (n - 1) std."""
    n = len(returns)
    mean = sum(returns) / n
    std = math.sqrt(sum((g - mean) ** 2 for g in returns) / (n - 1)) if n > 1 else 0.0
    return [(g - mean) / (std + 1e-9) for g in returns]


# 04_training_with_lora -----------------------------------------------------------------------
def action_mask(num_prompt_tokens: int, num_action_tokens: int) -> list[float]:
    """1.0 where a datum's target is an action token, 0.0 where it is still the prompt.

    The datum's targets are ``(prompt + action)[1:]``: the first ``num_prompt_tokens - 1``
    targets are prompt tokens, the remaining ``num_action_tokens`` are the action.
    """
    return [0.0] * (num_prompt_tokens - 1) + [1.0] * num_action_tokens


def importance_sampling_loss(
    learner_logprobs: torch.Tensor, sampler_logprobs: torch.Tensor, advantages: torch.Tensor
) -> torch.Tensor:
    """Tinker's ``importance_sampling`` loss: ``sum(-exp(lp - q) * A)`` over every token."""
    return (-torch.exp(learner_logprobs - sampler_logprobs) * advantages).sum()


# 05_plotting_results -------------------------------------------------------------------------
def moving_average(values: Sequence[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start)."""
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out
