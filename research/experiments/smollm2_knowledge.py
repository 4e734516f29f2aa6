"""What base SmolLM2 already knows of the held-out problems, before any training: the ceiling that
RL elicits from, measured apart from the answer format.

    python research/experiments/smollm2_knowledge.py                       # sums, products and differences
    python research/experiments/smollm2_knowledge.py --envs rg:sums-1digit-test --samples 16

Each held-out question ("Calculate 6 + 9.") is asked in SmolLM2's chat template with the reply
already begun, and the first integer the model continues with is checked against the answer:

- ``equation``: the reply begins with the question's own expression, ``"6 + 9 ="``; the model only
  has to say the number (how much arithmetic it knows);
- ``equation, boxed``: ``"6 + 9 = \\boxed{"``, the same with the answer's format;
- ``boxed``: the reply begins with ``"\\boxed{"``, the format the RL recipe trains; a number must
  come first (base SmolLM2 tends to restate the expression here instead).

Greedy (temperature 0) and sampled (temperature 1, ``--samples`` answers per question, as the
recipe's evaluation samples). Not a test: about a minute per env on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

import torch

import gemlab.envs  # noqa: F401  (registers the held-out splits)
from gemlab.doctor import cpu_name
from gemlab.env_ids import DIFFS_TEST, SUMS_TEST, TIMES_TEST
from gemlab.env_variants import HELD_OUT
from gemlab.templates import get_template
from gemlab.warmup import INTEGER
from tinker_emulator.models import SMOLLM2, build_model, load_tokenizer

EXPRESSION = re.compile(r"Calculate (.+)\.")
BEGINNINGS = {  # how the reply begins, given the question's expression
    "equation": lambda expression: f"{expression} =",
    "equation, boxed": lambda expression: f"{expression} = \\boxed{{",
    "boxed": lambda expression: "\\boxed{",
}


def held_out(env_id: str) -> list[tuple[str, str, int]]:
    """(question, its expression, answer) for each held-out question of ``env_id``."""
    import gem

    env = gem.make(env_id)
    rows = []
    for seed in range(HELD_OUT):  # seed s plays question s % 64: each once
        question, _ = env.reset(seed=seed)
        expression = EXPRESSION.search(question).group(1)
        rows.append((question, expression, int(env.unwrapped.data["answer"])))
    return rows


def accuracy(model: Any, tokenizer: Any, prompts: list[str], answers: list[int], samples: int) -> float:
    """The share of continuations of ``prompts`` whose first integer is the answer (greedy when
    ``samples`` is 0, else ``samples`` answers each at temperature 1)."""
    encoded = tokenizer(prompts, return_tensors="pt", padding=True)
    sampled = (
        {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "num_return_sequences": samples}
        if samples
        else {"do_sample": False}
    )
    with torch.no_grad():
        out = model.generate(**encoded, max_new_tokens=5, pad_token_id=tokenizer.pad_token_id, **sampled)
    texts = tokenizer.batch_decode(out[:, encoded.input_ids.shape[1]:], skip_special_tokens=True)
    per_prompt = max(samples, 1)
    right = [
        bool(m := INTEGER.search(text)) and int(m.group()) == answers[i // per_prompt] for i, text in enumerate(texts)
    ]
    return sum(right) / len(right)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=[SUMS_TEST, TIMES_TEST, DIFFS_TEST])
    parser.add_argument("--samples", type=int, default=8, help="sampled answers per question")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    tokenizer, model = load_tokenizer(SMOLLM2), build_model(SMOLLM2).eval()
    tokenizer.padding_side = "left"  # generate continues every row from its own last token
    chat = get_template("chat")  # the recipe's prompt (template=chat)
    print(
        f"base {SMOLLM2}, {HELD_OUT} held-out questions per env, first integer of the reply's continuation; "
        f"CPU: {cpu_name()}"
    )
    for env_id in args.envs:
        rows = held_out(env_id)
        answers = [answer for _, _, answer in rows]
        for name, begin in BEGINNINGS.items():
            prompts = [chat.render_text(question, tokenizer) + begin(expression) for question, expression, _ in rows]
            greedy = accuracy(model, tokenizer, prompts, answers, 0)
            sampled = accuracy(model, tokenizer, prompts, answers, args.samples)
            print(
                f"{env_id:22} reply begins {name:15} greedy {greedy:.3f}  sampled (T=1, {args.samples} each) "
                f"{sampled:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
