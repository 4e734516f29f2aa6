"""Pretraining of the ``gemlab/tiny`` preset: behaviour cloning of a sloppy GuessTheNumber player.

A real LLM comes to RL already able to read a game's hints; RL sharpens what pretraining put in
its distribution. A randomly initialised model cannot read anything, and LoRA on frozen random
weights does not learn to in minutes (docs/laptop-recipe.md has the measurements). So the tiny
preset is pretrained, all parameters, on transcripts of a *sloppy* player: at each turn it plays
the bisection guess (the middle of the numbers the hints still allow) with probability ``skill``,
and otherwise a uniformly random number in the game's range, hints ignored. The transcripts are
rendered exactly as the rollout renders prompts (``concat`` wrapper, ``qwen3_game`` template).
The loss is cross-entropy on the answer tokens; for the number, the target is the player's whole
distribution (a soft target), so every example teaches the bisection guess, not only the quarter
of them where it was played. A first stage with skill 1.0 teaches the bisection itself; the
second sets the sloppy mix.

The result plays like its teacher: it wins about 0.45 of easy games, where bisection wins them
all. That gap is what RL closes. ``python -m gemlab.tiny.pretrain`` rebuilds the shipped weights
(``tinker_emulator/catalogue/tiny/model.safetensors``) deterministically in a few minutes on a CPU.

The same recipe makes the bases of the reproduction studies (``registry.BASES``; ``--base NAME``):
``gemlab/tiny-guess20`` on GuessTheNumber 1-20 with 20 turns, and ``gemlab/tiny-products`` and
``gemlab/tiny-sums`` on one-digit products and sums, where the "bisection guess" is the right
answer and the sloppy answer any number the task's answers range over (0-81 and 0-20;
``qwen3_general`` template, as GEM uses for reasoning tasks).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from tqdm import tqdm

from gemlab.env_variants import ANSWERS
from gemlab.envs import make_envs
from gemlab.episodes import end_of_turn_ids, play_episode_now
from gemlab.templates import get_template
from gemlab.tiny import registry
from gemlab.tiny.model import build_tiny_model, load_tiny_tokenizer

ENV_ID = cast(str, registry.TINY_MODELS[registry.TINY].teacher_env)  # every tiny model has a teacher env
SKILL = 0.25
# (skill of the player whose answers are the targets, steps): first the bisection itself, then
# the sloppy player, so that bisection is in the model but played only a quarter of the time.
STAGES = ((1.0, 300), (SKILL, 300))
BATCH_SIZE = 64
LEARNING_RATE = 3e-3


@dataclass(frozen=True)
class GameState:
    """One turn of the sloppy player's game: the prompt the policy would see, the bisection
    guess there, the guess the player made, and the game's range of numbers."""

    prompt: list[int]
    middle: int
    guess: int
    numbers: range


def teacher_probs(state: GameState, skill: float) -> dict[int, float]:
    """A player of this ``skill``: the bisection guess with probability ``skill``, else any
    number of the game's range."""
    probs = {n: (1 - skill) / len(state.numbers) for n in state.numbers}
    probs[state.middle] += skill
    return probs


def game_states(env_id: str, skill: float, seed: int, tokenizer: Any) -> Iterator[GameState]:
    """Endless turns of games the sloppy player of ``skill`` plays, with prompts rendered as the
    rollout renders them."""
    rng = random.Random(seed)
    env = make_envs(env_id, 1, seed=seed, env_wrappers="concat")[0]
    game = env.unwrapped
    template = get_template("qwen3_game")
    while True:
        observation, _ = env.reset()
        numbers = range(game.min_number, game.max_number + 1)
        low, high = game.min_number, game.max_number
        states: list[GameState] = []

        def teacher(observation: str) -> str:  # bisects, except with probability 1 - skill
            nonlocal low, high
            middle = (low + high) // 2
            guess = middle if rng.random() < skill else rng.choice(numbers)  # noqa: B023  # teacher plays this game only
            states.append(GameState(template.render(observation, tokenizer), middle, guess, numbers))  # noqa: B023
            if guess < game.game_number:
                low = max(low, guess + 1)
            elif guess > game.game_number:
                high = min(high, guess - 1)
            return f"\\boxed{{{guess}}}"

        play_episode_now(env, teacher, start=observation)
        yield from states


def question_states(env_id: str, seed: int, tokenizer: Any) -> Iterator[GameState]:
    """Endless questions of a one-digit task (``variants.ANSWERS``), rendered as the rollout renders
    them; the "middle" (the answer the skilled teacher gives) is the right answer."""
    env = make_envs(env_id, 1, seed=seed, env_wrappers="concat")[0]
    template = get_template("qwen3_general")
    while True:
        observation, _ = env.reset()
        answer = int(env.unwrapped.data["answer"])
        yield GameState(template.render(observation, tokenizer), answer, answer, ANSWERS[env_id])


def teacher_states(env_id: str, skill: float, seed: int, tokenizer: Any) -> Iterator[GameState]:
    """The teacher's states for ``env_id``: GuessTheNumber games, or a one-digit task's questions."""
    if "GuessTheNumber" in env_id:
        return game_states(env_id, skill, seed, tokenizer)
    return question_states(env_id, seed, tokenizer)


def answer_tokens(tokenizer: Any) -> tuple[list[int], dict[int, int], list[int]]:
    """The answer ``\\boxed{n}<|im_end|>`` as (tokens before n, token of each n, tokens after n)."""
    before = list(tokenizer.encode("\\boxed{", add_special_tokens=False))
    after = list(tokenizer.encode("}", add_special_tokens=False)) + end_of_turn_ids(tokenizer)[:1]
    numbers = {}
    for n in range(0, 101):
        ids = tokenizer.encode(str(n), add_special_tokens=False)
        if len(ids) == 1:
            numbers[n] = ids[0]
    return before, numbers, after


def _batch(
    states: list[GameState], skill: float, answer: tuple[list[int], dict[int, int], list[int]], tokenizer: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded inputs, attention mask, labels for the answer's fixed tokens (-100 elsewhere),
    the position that predicts the number, and the distribution of a player of ``skill`` there.
    ``answer`` is ``answer_tokens(tokenizer)``."""
    before, numbers, after = answer
    sequences = [state.prompt + before + [numbers[state.guess]] + after for state in states]
    length = max(map(len, sequences))
    inputs = torch.full((len(states), length), tokenizer.pad_token_id)
    mask = torch.zeros((len(states), length), dtype=torch.long)
    labels = torch.full((len(states), length), -100)
    positions = torch.zeros(len(states), dtype=torch.long)
    targets = torch.zeros((len(states), len(tokenizer)))
    for row, (state, tokens) in enumerate(zip(states, sequences, strict=True)):
        start = len(state.prompt)
        inputs[row, : len(tokens)] = torch.tensor(tokens)
        mask[row, : len(tokens)] = 1
        labels[row, start : len(tokens)] = torch.tensor(tokens[start:])
        labels[row, start + len(before)] = -100  # the number is learned from the soft target
        positions[row] = start + len(before) - 1
        for n, p in teacher_probs(state, skill).items():
            targets[row, numbers[n]] = p
    return inputs, mask, labels, positions, targets


def pretrain(
    model: Any,
    tokenizer: Any,
    *,
    env_id: str = ENV_ID,
    stages: Sequence[tuple[float, int]] = STAGES,
    batch_size: int = BATCH_SIZE,
    learning_rate: float = LEARNING_RATE,
    seed: int = 0,
    progress: bool = True,
) -> list[float]:
    """Train every parameter of ``model`` (AdamW, cosine-decayed) on the sloppy player's games:
    each stage is (skill of the player whose answers are the targets, steps). The games are always
    the last stage's player's. Returns the mean loss per answer token at each step."""
    torch.manual_seed(seed)
    states = teacher_states(env_id, stages[-1][0], seed, tokenizer)
    answer = answer_tokens(tokenizer)
    skills = [skill for skill, steps in stages for _ in range(steps)]
    model.train()
    model.requires_grad_(True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=len(skills))
    losses = []
    # a text bar: a widget bar would flicker JupyterLab's kernel status to Idle while the cell runs
    for skill in tqdm(skills, desc="pretraining gemlab/tiny", unit="step", disable=not progress, file=sys.stdout):
        inputs, mask, labels, positions, targets = _batch(
            [next(states) for _ in range(batch_size)], skill, answer, tokenizer
        )
        logits = model(input_ids=inputs, attention_mask=mask).logits
        fixed = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), labels[:, 1:], reduction="sum")
        number = -(targets * logits[torch.arange(len(positions)), positions].log_softmax(-1)).sum()
        loss = (fixed + number) / int((labels != -100).sum() + len(positions))
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    model.eval()
    model.requires_grad_(False)
    return losses


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Rebuild a pretrained tiny base.")
    parser.add_argument(
        "--base", default=registry.TINY, choices=registry.BASES, help="which base (default: gemlab/tiny)"
    )
    base = parser.parse_args(argv).base
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    model = build_tiny_model(seed=0)
    losses = pretrain(model, load_tiny_tokenizer(), env_id=cast(str, registry.TINY_MODELS[base].teacher_env))
    registry.write_folder(base, model)
    # the models that load this base's weights (gemlab/tiny-chat for gemlab/tiny) are rebuilt from them
    registry.write_zoo(
        [name for name, spec in registry.TINY_MODELS.items() if spec.weights_from == base and name != base]
    )
    print(f"loss per answer token: {losses[0]:.3f} -> {sum(losses[-20:]) / 20:.3f}; wrote {registry.folder(base)}")


if __name__ == "__main__":
    main()
