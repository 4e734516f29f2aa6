"""A format warm-up on an Atropos environment's own prompts, to start ``python -m gemlab.atropos init_state=...`` from.

Atropos's reasoning_gym environment scores an answer only inside exactly one ``<answer>`` tag and
drops every group whose answers all score the same, so a model that never writes the tag never sends
the trainer a batch (research/notes/decoupled.md). This is ``gemlab.warmup``'s ``own_answers`` for
such an environment: the model answers the environment's own prompts (``get_next_item``'s messages,
system prompt included, rendered by the tokenizer's chat template as the environment renders them),
and each answer (its first ``OWN_TOKENS`` tokens) becomes its own target with its last integer, inside
the tag, after it. No right answer is used: the format is taught, what the model would answer is left as it
was. The answer's own text stays in the target because the environment also drops an answer of fewer
than 10 trained tokens, and the tag alone is about 8.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from tinker import types

from gemlab.datums import supervised_datum
from gemlab.episodes import end_of_turn_ids
from gemlab.seeds import derive_seed
from gemlab.warmup import last_integer, sft_step

TAG = "answer"  # reasoning_gym_environment's
OWN_TOKENS = 96  # an answer's first 96 tokens: it learns to tag its number well within the environment's budget
TOP_P = 0.95  # reasoning_gym_environment samples at temperature 1.0, top_p 0.95
MIN_TRAINED_TOKENS = 10  # reasoning_gym_environment drops an answer with fewer ("insufficient context")


class Answer(NamedTuple):
    """A sampled answer as text without special tokens; ``finished`` when it ended by itself, not at
    ``max_tokens``."""

    text: str
    finished: bool


def item_messages(item: Sequence[Any]) -> list[dict[str, str]]:
    """The chat messages of an Atropos item whose first element is its prompt as a tuple of frozen
    message items (reasoning_gym's and gsm8k's environments make them so)."""
    return [dict(message) for message in item[0]]


def prompt_tokens(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The prompt's token ids as the environment makes them: the chat template as text, then encoded."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))


def tag_count(text: str, tag: str = TAG) -> int:
    """How many ``<tag>...</tag>`` spans ``text`` holds outside ``<think>`` blocks (the environment
    scores an answer only when this is 1)."""
    outside = re.sub(r"<think>.*?</think>", "", text, flags=re.DOTALL | re.IGNORECASE)
    return len(re.findall(rf"<{tag}>.*?</{tag}>", outside, flags=re.DOTALL | re.IGNORECASE))


def tagged_answer(text: str, tag: str = TAG) -> str | None:
    """``text`` followed by ``<tag>N</tag>`` for its last integer ``N``; ``None`` when it has none, or
    has a tag already (a second one would fail the environment's format)."""
    number = last_integer(text)
    return None if number is None or tag_count(text, tag) else f"{text.rstrip()}\n<{tag}>{number}</{tag}>"


async def environment_items(
    env: Any, count: int, tokenizer: Any = None, max_prompt_tokens: int | None = None
) -> list[Any]:
    """``count`` items from ``env.get_next_item()``: an item it fails to make (``None``) is skipped, and so is
    one whose prompt has ``max_prompt_tokens`` tokens or more (the environment samples nothing for it)."""
    items: list[Any] = []
    while len(items) < count:
        item = await env.get_next_item()
        if item is None:
            continue
        if max_prompt_tokens is None or len(prompt_tokens(tokenizer, item_messages(item))) < max_prompt_tokens:
            items.append(item)
    return items


async def answer_items(
    sampler: Any,
    tokenizer: Any,
    items: Sequence[Any],
    *,
    samples: int = 1,
    max_tokens: int = OWN_TOKENS,
    temperature: float = 1.0,
    seed: int = 0,
) -> list[list[Answer]]:
    """``samples`` answers to each item's prompt (item ``i`` sampled with ``derive_seed(seed, i)``)."""

    async def answer(index: int, item: Any) -> list[Answer]:
        response = await sampler.sample_async(
            prompt=types.ModelInput.from_ints(prompt_tokens(tokenizer, item_messages(item))),
            num_samples=samples,
            sampling_params=types.SamplingParams(
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=TOP_P,
                stop=end_of_turn_ids(tokenizer),
                seed=derive_seed(seed, index),
            ),
        )
        return [
            Answer(tokenizer.decode(s.tokens, skip_special_tokens=True), s.stop_reason == "stop")
            for s in response.sequences
        ]

    return list(await asyncio.gather(*(answer(i, item) for i, item in enumerate(items))))


async def format_warmup(
    training_client: Any,
    tokenizer: Any,
    env: Any,
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    max_asked: int = 4,
    max_prompt_tokens: int | None = None,
    min_tokens: int = MIN_TRAINED_TOKENS,
) -> list[float]:
    """``steps`` cross-entropy steps of ``batch_size`` (prompt, ``answer\n<answer>N</answer>``) examples
    from the model's own answers to ``env``'s prompts, all asked of the weights as they were before; the
    mean loss per answer token of each step. An answer cut at ``OWN_TOKENS`` is kept as cut (half of
    SmolLM2's run longer); one whose target with its end-of-turn token is shorter than ``min_tokens`` is
    not used. Raises ``ValueError`` when fewer than one answer in ``max_asked`` can be used. Prompts of
    ``max_prompt_tokens`` or more are left out, as the environment leaves them out (reasoning_gym's: its
    ``max_token_length``)."""
    wanted = steps * batch_size
    sampler = await training_client.save_weights_and_get_sampling_client_async()
    end = end_of_turn_ids(tokenizer)[:1]
    datums: list[types.Datum] = []
    asked = 0
    while len(datums) < wanted and asked < max_asked * wanted:
        items = await environment_items(env, wanted - len(datums), tokenizer, max_prompt_tokens)
        answers = await answer_items(sampler, tokenizer, items, seed=derive_seed(seed, asked))
        asked += len(items)
        for item, ((text, _),) in zip(items, answers, strict=True):
            if (target := tagged_answer(text)) is not None:
                answer = list(tokenizer.encode(target, add_special_tokens=False)) + end
                if len(answer) >= min_tokens:
                    datums.append(supervised_datum(prompt_tokens(tokenizer, item_messages(item)), answer))
    if len(datums) < wanted:
        raise ValueError(
            f"only {len(datums)} of {asked} answers held a number and made {min_tokens} tokens tagged; "
            f"{wanted} needed"
        )
    return [
        await sft_step(training_client, datums[step * batch_size : (step + 1) * batch_size], learning_rate)
        for step in range(steps)
    ]
