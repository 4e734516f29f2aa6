"""Supervised warm-up (SFT) before RL, through the backend's own ``cross_entropy`` loss.

A randomly initialised model never writes a valid action, so RL would see only format errors.
A few cross-entropy steps on scripted actions teach the format (SFT teaches the rules; RL then
teaches the strategy). The scripted actions come from the env itself: GEM games provide
``sample_random_action()``, which answers in the expected ``\\boxed{...}`` form. The laptop
preset's ``gemlab/tiny`` is pretrained and needs none; ``gemlab/tiny-random`` (notebook 02) does.
"""

from __future__ import annotations

import random
import sys
from typing import Any, Sequence

from tinker import types
from tqdm import tqdm

from gemlab.datums import supervised_datum
from gemlab.episodes import end_of_turn_ids, play_episode_now
from gemlab.seeds import derive_seed
from gemlab.step import adam_params
from gemlab.templates import Template

WARMUP_STREAM = -1  # derive_seed(seed, -1): the warm-up's stream (gemlab/seeds.py lists them all)


def scripted_examples(envs: Sequence[Any], tokenizer: Any, template: Template, count: int) -> list[types.Datum]:
    """``count`` (prompt, scripted action) datums from playing the envs with their random actions."""
    end = end_of_turn_ids(tokenizer)[:1]
    datums: list[types.Datum] = []
    while len(datums) < count:
        for env in envs:
            teacher = env.unwrapped.sample_random_action  # GEM's scripted player, in the expected format
            episode = play_episode_now(env, lambda observation: teacher(), max_turns=count - len(datums))
            for turn in episode.transitions:
                answer = list(tokenizer.encode(turn.action, add_special_tokens=False)) + end
                datums.append(supervised_datum(template.render(turn.observation, tokenizer), answer))
            if len(datums) >= count:
                break
    return datums


async def warmup_async(
    training_client: Any, tokenizer: Any, envs: Sequence[Any], template: Template, config: Any, *, progress: Any = True
) -> list[float]:
    """``config.warmup_steps`` cross-entropy steps of ``config.batch_size`` examples; returns the
    mean loss per answer token at each step. ``progress``: ``True`` for a bar of its own, ``False``
    for none, or a tqdm bar to advance by one a step (a notebook's text bar)."""
    random.seed(derive_seed(config.seed, WARMUP_STREAM))  # GEM's scripted answers draw from the global random
    own_bar = isinstance(progress, bool)
    # a text bar: a widget bar would flicker JupyterLab's kernel status to Idle while the cell runs
    bar = tqdm(total=config.warmup_steps, desc="SFT warm-up", unit="step", disable=not progress, file=sys.stdout) if own_bar else progress
    losses: list[float] = []
    for _ in range(config.warmup_steps):
        datums = scripted_examples(envs, tokenizer, template, config.batch_size)
        backward = training_client.forward_backward(datums, "cross_entropy")
        optim = training_client.optim_step(adam_params(config.warmup_learning_rate))
        result = await backward.result_async()
        await optim.result_async()
        answer_tokens = sum(float(d.loss_fn_inputs["weights"].to_torch().sum()) for d in datums)
        losses.append(float(result.metrics["loss:sum"]) / answer_tokens)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        bar.update(1)
    if own_bar:
        bar.close()
    return losses
