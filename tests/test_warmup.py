"""The warm-up's label-free examples: the model's own answers, last integer re-written as \\boxed{N}."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from gemlab import Trainer, make_config
from gemlab.envs import make_envs
from gemlab.templates import get_template
from gemlab.warmup import boxed_last_integer, first_code_block, own_examples, scripted_examples
from tinker_emulator.models import load_tokenizer


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("4 + 3 equals 7.", "\\boxed{7}"),
        ("First 12, then -3 is the answer", "\\boxed{-3}"),
        ("Sure! \\boxed{05}", "\\boxed{5}"),
        ("I cannot compute that.", None),
    ],
)
def test_the_last_integer_becomes_the_target(text, target):
    assert boxed_last_integer(text) == target


@pytest.mark.parametrize(
    ("text", "target"),
    [
        ("Sure:\n```python\nprint(2 * 3)\n```\nand more text", "Sure:\n```python\nprint(2 * 3)\n```"),
        ("<python>print(1)</python> then ```python\nx\n```", "<python>print(1)</python>"),
        ("```\nprint(1)\n```", None),  # not marked as Python: GEM's tool would not run it
        ("no code", None),
    ],
)
def test_an_answer_is_cut_after_its_first_python_block(text, target):
    assert first_code_block(text) == target


class _Answers:
    """A sampling client that answers the n-th prompt with ``texts[n % len(texts)]`` (and records the prompts)."""

    def __init__(self, tokenizer, texts):
        self.tokenizer, self.texts, self.prompts = tokenizer, texts, []

    async def sample(self, prompt, num_samples, sampling_params):
        text = self.texts[len(self.prompts) % len(self.texts)]
        self.prompts.append(prompt.to_ints())
        tokens = self.tokenizer.encode(text, add_special_tokens=False)
        return SimpleNamespace(
            sequences=[SimpleNamespace(tokens=tokens, logprobs=[0.0] * len(tokens), stop_reason="stop")]
        )


def _training_client(answers: _Answers) -> SimpleNamespace:
    """A training client whose weights' sampler is ``answers``."""

    async def save_weights_and_get_sampling_client():
        return answers

    return SimpleNamespace(save_weights_and_get_sampling_client=save_weights_and_get_sampling_client)


def test_own_answers_are_asked_in_the_chat_template_and_trained_in_the_runs():
    tokenizer = load_tokenizer("gemlab/tiny")
    answers = _Answers(tokenizer, ["It is 3 + 4 = 7.", "no idea", "The answer: 12"])
    training = _training_client(answers)
    envs = make_envs("rg:sums-1digit-train", 2, seed=0)
    template = get_template("qwen3_general")
    datums = asyncio.run(own_examples(training, envs, tokenizer, template, 4, seed=1, kind="own_answers"))
    assert len(datums) == 4 and len(answers.prompts) == 6  # "no idea" has no number: asked again
    asked = tokenizer.decode(answers.prompts[0])
    assert asked.startswith("<|im_start|>user\nCalculate ") and asked.endswith("<|im_start|>assistant\n")
    targets = []
    for datum in datums:
        tokens = datum.model_input.to_ints() + [int(datum.loss_fn_inputs["target_tokens"].to_torch()[-1])]
        weights = datum.loss_fn_inputs["weights"].to_torch().tolist()
        trained = [t for t, w in zip(tokens[1:], weights, strict=True) if w > 0]
        targets.append(tokenizer.decode(trained, skip_special_tokens=True))
        # the run's template, not the chat one
        assert tokenizer.decode(tokens).startswith(template.render_text("x")[:20])
    assert targets == ["\\boxed{7}", "\\boxed{12}", "\\boxed{7}", "\\boxed{12}"]


def test_a_model_that_never_writes_a_number_is_told_in_one_line():
    tokenizer = load_tokenizer("gemlab/tiny")
    training = _training_client(_Answers(tokenizer, ["no idea"]))
    with pytest.raises(ValueError, match="wrote a number in only 0 of 12 answers"):
        asyncio.run(
            own_examples(
                training,
                make_envs("rg:sums-1digit-train", 1),
                tokenizer,
                get_template("chat"),
                3,
                seed=0,
                kind="own_answers",
            )
        )


def test_a_run_warms_up_on_its_own_answers_without_a_scripted_player(tmp_path):
    config = make_config(
        "laptop", log_dir=str(tmp_path), run_name="own", env_id="rg:sums-1digit-train", template="qwen3_general",
        warmup_data="own_answers", warmup_steps=2, warmup_batch_size=4, num_env=4, batch_size=8, max_steps=1,
    )  # fmt: skip
    with Trainer(config, progress=False) as trainer:
        losses = trainer.warmup()
        trainer.step()
    assert len(losses) == 2 and all(loss > 0 for loss in losses)
    assert (tmp_path / "own" / "warmup.jsonl").read_text().count("\n") == 2


def _trained_text(tokenizer, datum) -> str:
    tokens = datum.model_input.to_ints() + [int(datum.loss_fn_inputs["target_tokens"].to_torch()[-1])]
    weights = datum.loss_fn_inputs["weights"].to_torch().tolist()
    return tokenizer.decode([t for t, w in zip(tokens[1:], weights, strict=True) if w > 0], skip_special_tokens=True)


def test_own_code_shows_the_tool_protocol_from_the_models_own_code_without_the_right_answer():
    """An answer with a Python block gives two examples: the block, cut after it, as the first
    turn; the tool's printed result, boxed, after the tool's reply in the same conversation. An
    answer without a block, or whose block fails or prints no integer, is skipped. The code is the model's,
    wrong or right: no label is used."""
    tokenizer = load_tokenizer("gemlab/tiny-chat")
    printed_no_number = "```python\nprint('the product')\n```"
    failed = "```python\nprint(x * 2)\n```"  # a NameError: its traceback holds line numbers, not a result
    answers = _Answers(
        tokenizer, ["no code here", printed_no_number, failed, "Let me:\n```python\nprint(100 * 10 + 1)\n```\nso it is"]
    )
    envs = make_envs("math:products-3x2-train", 2, seed=0, env_wrappers="python_tool_sandboxed")
    template = get_template("chat_turns")
    datums = asyncio.run(own_examples(_training_client(answers), envs, tokenizer, template, 4, seed=3, kind="own_code"))
    assert [_trained_text(tokenizer, d) for d in datums] == [
        "Let me:\n```python\nprint(100 * 10 + 1)\n```",
        "\\boxed{1001}",
    ] * 2
    first, second = (d.model_input.to_ints() for d in datums[:2])
    assert second[: len(first)] == first  # the same conversation, continued
    assert "Code execution result: 1001" in tokenizer.decode(second[len(first) :])


def test_tool_reports_trains_only_the_report_of_what_the_tool_printed():
    """The same answers as own_code gives, less the code: the model's first turn is left to RL."""
    tokenizer = load_tokenizer("gemlab/tiny-chat")
    answers = _Answers(tokenizer, ["no code here", "Let me:\n```python\nprint(100 * 10 + 1)\n```\nso it is"])
    envs = make_envs("math:products-3x2-train", 2, seed=0, env_wrappers="python_tool_sandboxed")
    datums = asyncio.run(
        own_examples(
            _training_client(answers), envs, tokenizer, get_template("chat_turns"), 2, seed=3, kind="tool_reports"
        )
    )
    assert [_trained_text(tokenizer, d) for d in datums] == ["\\boxed{1001}"] * 2
    assert "Code execution result: 1001" in tokenizer.decode(datums[0].model_input.to_ints())


def test_scripted_games_in_chat_turns_are_the_conversation_the_run_will_have():
    """With ``chat_turns``, the scripted player's later turns are asked as the episode so far (the
    chat template's own rendering of the conversation), not as a lone message without the rules."""
    tokenizer = load_tokenizer("gemlab/tiny-chat")
    envs = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0, env_wrappers="")
    datums = scripted_examples(envs, tokenizer, get_template("chat_turns"), 3)
    prompts = [
        tokenizer.decode(d.model_input.to_ints()[: d.loss_fn_inputs["weights"].to_torch().tolist().index(1.0) + 1])
        for d in datums
    ]
    answers = [_trained_text(tokenizer, d) for d in datums]
    assert all(answer.startswith("\\boxed{") for answer in answers)
    conversation = [{"role": "user", "content": envs[0].unwrapped._get_instructions()}]
    assert prompts[0] == tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    for index, answer in enumerate(answers[:-1]):
        reply = prompts[index + 1].rsplit("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        guess = answer.removeprefix("\\boxed{").removesuffix("}")
        assert reply.startswith(f"At turn {index + 1}, you guessed {guess}")  # the game's reply to that guess
        conversation += [{"role": "assistant", "content": answer}, {"role": "user", "content": reply}]
        assert prompts[index + 1] == tokenizer.apply_chat_template(
            conversation, tokenize=False, add_generation_prompt=True
        )
