"""The format warm-up on an Atropos environment's own prompts (gemlab.atropos.warmup): the environment's
messages, system prompt included, rendered as the environment renders them; the model's own answer
followed by its last integer inside the environment's ``<answer>`` tag as the target, long enough for the
environment to keep; no right answer used."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gemlab.atropos.warmup import (
    environment_items,
    format_warmup,
    item_messages,
    prompt_tokens,
    tag_count,
    tagged_answer,
)
from tinker_emulator.models import load_tokenizer

SYSTEM = "Think, then put your final answer inside <answer></answer> tags."


class _Environment:
    """Atropos's item convention: (prompt as a tuple of frozen messages, the problem, its scorer); every
    third item fails to be made (``None``), as reasoning_gym's ``get_next_item`` can."""

    def __init__(self) -> None:
        self.made = 0

    async def get_next_item(self):
        self.made += 1
        if self.made % 3 == 0:
            return None
        messages = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": f"What is {self.made} + 1?"})
        return (tuple(frozenset(m.items()) for m in messages), {"answer": str(self.made + 1)}, None)


class _Client:
    """A training client whose sampler answers the n-th prompt with ``texts[n % len(texts)]``, ended by
    itself unless the text ends with "..." (cut at ``max_tokens``); it records the prompts asked and the
    datums trained."""

    def __init__(self, tokenizer, texts) -> None:
        self.tokenizer, self.texts, self.prompts, self.trained = tokenizer, texts, [], []

    async def save_weights_and_get_sampling_client_async(self):
        return self

    async def sample_async(self, prompt, num_samples, sampling_params):
        texts = [self.texts[(len(self.prompts) + i) % len(self.texts)] for i in range(num_samples)]
        self.prompts.append(prompt.to_ints())
        assert (sampling_params.temperature, sampling_params.top_p) == (1.0, 0.95)  # as the environment samples
        return SimpleNamespace(
            sequences=[
                SimpleNamespace(
                    tokens=self.tokenizer.encode(t, add_special_tokens=False),
                    stop_reason="length" if t.endswith("...") else "stop",
                )
                for t in texts
            ]
        )

    def forward_backward(self, datums, loss_fn):
        assert loss_fn == "cross_entropy"
        self.trained.append(datums)
        weights = sum(float(d.loss_fn_inputs["weights"].to_torch().sum()) for d in datums)
        return _Done({"loss:sum": 2.0 * weights})

    def optim_step(self, params):
        return _Done({})


class _Done:
    def __init__(self, metrics) -> None:
        self.metrics = metrics

    async def result_async(self):
        return self


def _trained_text(tokenizer, datum) -> tuple[str, str]:
    tokens = datum.model_input.to_ints() + [int(datum.loss_fn_inputs["target_tokens"].to_torch()[-1])]
    weights = datum.loss_fn_inputs["weights"].to_torch().tolist()
    answer = [t for t, w in zip(tokens[1:], weights, strict=True) if w > 0]
    return tokenizer.decode(tokens[: len(tokens) - len(answer)]), tokenizer.decode(answer, skip_special_tokens=True)


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("It is 3 + 4 = 7. ", "It is 3 + 4 = 7.\n<answer>7</answer>"),
        ("-3, or 05", "-3, or 05\n<answer>5</answer>"),
        ("no idea", None),
        ("<answer>7</answer> so 7", None),  # a second tag would fail the environment's format
    ],
)
def test_the_answer_is_followed_by_its_last_integer_inside_the_answer_tag(text, target):
    assert tagged_answer(text) == target


def test_tags_inside_think_do_not_count_as_the_environment_counts_them():
    assert tag_count("<answer>1</answer>") == 1
    assert tag_count("<think><answer>1</answer></think> <ANSWER>2</ANSWER>") == 1
    assert tag_count("<answer>1</answer><answer>2</answer>") == 2 and tag_count("7") == 0


def test_the_warmup_trains_the_tag_on_the_environments_own_prompts():
    tokenizer = load_tokenizer("gemlab/tiny-chat")
    client = _Client(tokenizer, ["So 3 + 1 is 4.", "no idea", "The answer, I think: 12", "7", "So it is 5..."])
    losses = asyncio.run(
        format_warmup(
            client, tokenizer, _Environment(), steps=2, batch_size=2, learning_rate=1e-3, seed=0, min_tokens=20
        )
    )
    assert losses == [2.0, 2.0] and [len(batch) for batch in client.trained] == [2, 2]
    pairs = [_trained_text(tokenizer, d) for batch in client.trained for d in batch]
    messages = item_messages(asyncio.run(_Environment().get_next_item()))
    assert (
        tokenizer.decode(prompt_tokens(tokenizer, messages)) == pairs[0][0]
    )  # the prompt, as the environment renders it
    assert SYSTEM in pairs[0][0] and "What is 1 + 1?" in pairs[0][0]
    # skipped, and asked again from the environment's next items: "no idea" (no number) and "7" (its target,
    # 16 of this tokenizer's tokens and the end of turn, is under min_tokens); one cut at the length is kept
    targets = ["So 3 + 1 is 4.\n<answer>4</answer>", "The answer, I think: 12\n<answer>12</answer>"]
    assert [answer for _, answer in pairs] == [*targets, "So it is 5...\n<answer>5</answer>", targets[0]]
    assert len(client.prompts) == 6  # 4 asked, then 2 for the two skipped


def test_a_model_that_never_writes_a_number_is_told_in_one_line():
    tokenizer = load_tokenizer("gemlab/tiny-chat")
    client = _Client(tokenizer, ["no idea"])
    with pytest.raises(ValueError, match="only 0 of 16 answers held a number and made 10 tokens tagged; 4 needed"):
        asyncio.run(format_warmup(client, tokenizer, _Environment(), steps=1, batch_size=4, learning_rate=1e-3, seed=0))
    assert not client.trained


def test_items_whose_prompt_leaves_no_room_to_answer_are_skipped_as_the_environment_skips_them():
    tokenizer = load_tokenizer("gemlab/tiny-chat")

    class Long(_Environment):
        async def get_next_item(self):
            item = await super().get_next_item()
            if item is None or self.made % 2:
                return item
            messages = [{"role": "user", "content": "very " * 300 + "long"}]
            return (tuple(frozenset(m.items()) for m in messages), {}, None)

    items = asyncio.run(environment_items(Long(), 3, tokenizer, max_prompt_tokens=100))
    lengths = [len(prompt_tokens(tokenizer, item_messages(item))) for item in items]
    assert len(items) == 3 and max(lengths) < 100
    assert len(asyncio.run(environment_items(Long(), 3))) == 3  # without a limit, nothing but None is skipped
