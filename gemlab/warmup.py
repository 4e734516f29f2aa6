"""Supervised warm-up (SFT) before RL, through the backend's own ``cross_entropy`` loss.

A model that never writes a valid action gives RL only format errors to learn from. A few
cross-entropy steps teach the format (SFT teaches the rules; RL then teaches the strategy). Where
the examples come from is ``config.warmup_data``:

- ``"scripted"``: the env's own player. GEM games provide ``sample_random_action()``, which
  answers in the expected ``\\boxed{...}`` form; ``gemlab/tiny-random`` (notebook 02) learns the
  format this way.
- ``"own_answers"``: the model's own answers, re-formatted. Each problem is asked in the
  tokenizer's chat template (``OWN_TOKENS`` tokens, the run's temperature); the last integer the model
  wrote becomes the target ``\\boxed{N}``, and an answer without one is skipped. No ground truth
  is used, so any env whose answers are integers works, including reasoning-gym tasks, which have
  no scripted player. SmolLM2 adds, but explains instead of answering in the format: this
  teaches it the format and leaves its arithmetic (right or wrong) as it was.
- ``"own_code"``: the model's own code, for tool envs (GEM's python tool). Each problem is asked
  in the run's template (``OWN_CODE_TOKENS`` tokens, the run's temperature); an answer that holds a Python
  block (```` ```python ... ``` ```` or ``<python>...</python>``, as GEM's tool parses them) is cut
  after its first block, which becomes the first turn's target. The env then runs that block
  with its tool, as in an episode, and the last integer the tool printed becomes the second turn's
  target ``\\boxed{N}`` (an answer without a block, or whose block failed (an error, a timeout:
  GEM's tool counts no success), printed more than the sandbox passes on, or printed no integer,
  is skipped: such code shows no protocol worth copying). Nothing is checked
  against the right answer: this shows the model the protocol (call the tool with the code it
  would have written anyway, then report what the tool printed), right or wrong.
- ``"tool_reports"``: as ``"own_code"``, but only the second turn is trained (report what the
  tool printed, as ``\\boxed{N}``), leaving the code to RL. Measured on SmolLM2 and products
  (2 x 12 reports): it stopped calling the tool altogether (1.0 turns per episode, every answer a
  bare ``\\boxed{N}`` from the first turn), so RL had no reward to learn from. Kept as the
  measured counterpart of ``"own_code"``, which on the same task (2 steps of 16 (code, report)
  pairs) took held-out success from 0.00 to 0.28 before any RL.

The laptop preset's ``gemlab/tiny`` is pretrained and needs no warm-up.
"""

from __future__ import annotations

import asyncio
import random
import re
import sys
from collections.abc import Awaitable, Sequence
from typing import Any, cast

from tinker import types
from tqdm import tqdm

from gemlab.datums import supervised_datum
from gemlab.episodes import Action, Prompting, end_of_turn_ids, llm_policy, play_episode_now
from gemlab.seeds import derive_seed
from gemlab.step import adam_params
from gemlab.templates import Template, get_template

WARMUP_STREAM = -1  # derive_seed(seed, -1): the warm-up's stream (gemlab/seeds.py lists them all)
OWN_TOKENS = 48  # room for a short explanation and its number
OWN_CODE_TOKENS = 64  # room for a line of code in a block, and some words around it
MAX_ASKED = 4  # problems asked per example wanted, at most: an answer with a number
# from code, where 1 answer in 10 holds a block that runs and prints an integer (SmolLM2 at 0.7):
MAX_ASKED_CODE = 16  # problems asked per example wanted, at most
MIN_ROUND_CODE = 32  # problems asked at once, at least: a round costs a whole generation, however few rows it has
INTEGER = re.compile(r"-?\d+")
CODE_BLOCK = re.compile(r"<python>.*?</python>|```\n?python.*?```", re.DOTALL)  # the blocks GEM's PythonCodeTool runs


def scripted_examples(envs: Sequence[Any], tokenizer: Any, template: Template, count: int) -> list[types.Datum]:
    """``count`` (prompt, scripted action) datums from playing the envs with their random actions.
    For a template that ``continues``, each later turn's prompt is the episode so far, as in RL."""
    end = end_of_turn_ids(tokenizer)[:1]
    datums: list[types.Datum] = []
    while len(datums) < count:
        for env in envs:
            teacher = env.unwrapped.sample_random_action  # GEM's scripted player, in the expected format
            episode = play_episode_now(env, lambda observation: teacher(), max_turns=count - len(datums))  # noqa: B023  # called within this iteration
            history: list[int] = []
            for turn in episode.transitions:
                answer = list(tokenizer.encode(turn.action, add_special_tokens=False)) + end
                if template.continues and history:
                    prompt = template.continue_tokens(history, turn.observation, tokenizer)
                else:
                    prompt = template.render(turn.observation, tokenizer)
                datums.append(supervised_datum(prompt, answer))
                history = prompt + answer
            if len(datums) >= count:
                break
    return datums


def last_integer(text: str) -> int | None:
    """The last integer written in ``text`` (an own answer's number); ``None`` when it has none."""
    numbers = INTEGER.findall(text)
    return int(numbers[-1]) if numbers else None


def boxed_last_integer(text: str) -> str | None:
    """``\\boxed{N}`` for the last integer ``N`` in ``text``; ``None`` when it has none."""
    number = last_integer(text)
    return None if number is None else f"\\boxed{{{number}}}"


def first_code_block(text: str) -> str | None:
    """``text`` up to the end of its first Python block (the part GEM's tool runs); ``None`` without one."""
    block = CODE_BLOCK.search(text)
    return text[: block.end()] if block else None


async def own_examples(
    training_client: Any,
    envs: Sequence[Any],
    tokenizer: Any,
    template: Template,
    count: int,
    *,
    seed: int,
    kind: str,
    temperature: float = 1.0,
) -> list[types.Datum]:
    """``count`` (prompt, target) datums from the current weights' own answers: problem ``i`` is
    the first observation of an env reset with ``derive_seed(seed, i)``, asked as ``kind`` says
    (``own_answers``: the chat template, the last integer as ``\\boxed{N}``; ``own_code``: the
    run's template, the answer cut after its first Python block, then the tool's last printed
    integer as ``\\boxed{N}``; ``tool_reports``: that second turn alone); the datums' prompts are
    ``template``'s. Gives up after ``MAX_ASKED * count`` problems (``MAX_ASKED_CODE`` for code)."""
    sampler = await training_client.save_weights_and_get_sampling_client()
    own_code = kind in ("own_code", "tool_reports")
    if own_code:
        asking, target_of = Prompting(tokenizer, template, OWN_CODE_TOKENS, temperature), first_code_block
    else:
        asking, target_of = Prompting(tokenizer, get_template("chat"), OWN_TOKENS, temperature), boxed_last_integer
    end = end_of_turn_ids(tokenizer)[:1]

    async def examples(index: int) -> list[types.Datum]:
        env = envs[index % len(envs)]
        observation, _ = env.reset(seed=derive_seed(seed, index))
        action = await cast(
            Awaitable[Action], llm_policy(sampler, asking, seed=derive_seed(seed, index, 1))(observation)
        )  # async
        target = target_of(tokenizer.decode(action.act_tokens, skip_special_tokens=True))
        if target is None:
            return []
        prompt, answer = (
            template.render(observation, tokenizer),
            list(tokenizer.encode(target, add_special_tokens=False)) + end,
        )
        found = [] if kind == "tool_reports" else [supervised_datum(prompt, answer)]
        if own_code:  # the tool runs the block; what it printed, boxed, is the next turn's answer
            tool_output, _, done, _, info = env.step(target)
            ran = not done and info.get("tool_success_counter", 0) > 0 and "[output cut at" not in tool_output
            reported = boxed_last_integer(tool_output) if ran else None
            if reported is None:  # code that failed, or printed no number, shows no protocol worth copying
                return []
            following = (
                template.continue_tokens(prompt + answer, tool_output, tokenizer)
                if template.continues
                else template.render(tool_output, tokenizer)
            )
            found.append(supervised_datum(following, list(tokenizer.encode(reported, add_special_tokens=False)) + end))
        return found

    datums: list[types.Datum] = []
    asked = 0
    limit, least = (MAX_ASKED_CODE * count, MIN_ROUND_CODE) if own_code else (MAX_ASKED * count, 0)
    while len(datums) < count and asked < limit:
        wanted = max(count - len(datums), min(least, limit - asked))
        found = await asyncio.gather(*(examples(asked + i) for i in range(wanted)))  # the backend batches them
        datums.extend(d for group in found for d in group)
        asked += wanted
    if len(datums) < count:
        what = "a Python block that printed an integer" if own_code else "a number"
        raise ValueError(
            f"warmup_data={kind!r}: the model wrote {what} in only {len(datums)} of {asked} answers; use "
            "another warm-up"
        )
    return datums[:count]


async def warmup_async(
    training_client: Any, tokenizer: Any, envs: Sequence[Any], template: Template, config: Any, *, progress: Any = True
) -> list[float]:
    """``config.warmup_steps`` cross-entropy steps of ``warmup_batch_size`` (else ``batch_size``) examples; returns the
    mean loss per answer token at each step. ``progress``: ``True`` for a bar of its own, ``False``
    for none, or a tqdm bar to advance by one a step (a notebook's text bar)."""
    random.seed(derive_seed(config.seed, WARMUP_STREAM))  # GEM's scripted answers draw from the global random
    own_bar = isinstance(progress, bool)
    # a text bar: a widget bar would flicker JupyterLab's kernel status to Idle while the cell runs
    bar = (
        tqdm(total=config.warmup_steps, desc="SFT warm-up", unit="step", disable=not progress, file=sys.stdout)
        if own_bar
        else progress
    )
    per_step = config.warmup_batch_size or config.batch_size
    own = config.warmup_data in ("own_answers", "own_code", "tool_reports")
    if own:  # all asked of the model as it was before the warm-up
        bar.set_postfix_str(f"the model answers {config.warmup_steps * per_step} problems")
        examples = await own_examples(
            training_client,
            envs,
            tokenizer,
            template,
            config.warmup_steps * per_step,
            seed=derive_seed(config.seed, WARMUP_STREAM),
            kind=config.warmup_data,
            temperature=config.temperature,
        )
    losses: list[float] = []
    for index in range(config.warmup_steps):
        if own:
            datums = examples[index * per_step : (index + 1) * per_step]
        else:
            datums = scripted_examples(envs, tokenizer, template, per_step)
        losses.append(await sft_step(training_client, datums, config.warmup_learning_rate))
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        bar.update(1)
    if own_bar:
        bar.close()
    return losses


async def sft_step(training_client: Any, datums: Sequence[types.Datum], learning_rate: float) -> float:
    """One cross-entropy step on ``datums`` (Adam at ``learning_rate``); the mean loss per answer token."""
    backward = training_client.forward_backward(list(datums), "cross_entropy")
    optim = training_client.optim_step(adam_params(learning_rate))
    result = await backward.result_async()
    await optim.result_async()
    answer_tokens = sum(float(d.loss_fn_inputs["weights"].to_torch().sum()) for d in datums)
    return float(result.metrics["loss:sum"]) / answer_tokens
