"""Three GEM env variants (the reproduction studies use them), registered through GEM's ``register``.

- ``game:GuessTheNumber-v0-1to20``: GEM's GuessTheNumberEnv with its own class defaults (1-20,
  20 turns). Any consistent player wins within 20 turns, so only the discount factor rewards
  winning *fast*: the setting where the gamma study can show something (the easy level's 4 turns
  on 1-10 already force near-bisection to win at all).
- ``rg:products-1digit``: GEM's reasoning-gym task ``rg:products`` restricted to one-digit factors
  (reasoning-gym's ``ProductsConfig(min_digits=1, max_digits=1)``): a single-turn task whose
  answers (0-81) a 0.4M-parameter model can learn; the stock config has factors of up to 5 digits.
- ``rg:sums-1digit``: GEM's reasoning-gym task ``rg:basic_arithmetic`` restricted to the sum of two
  one-digit numbers (``operators=("+",)``, no negation, no parentheses; reasoning-gym's one-digit
  numbers are 0-10, so the answers are 0-20): a second single-turn task. The stock config mixes
  up to six terms of up to four digits and all four operators.

Importing ``gemlab.envs`` registers all three, so ``python -m gemlab.train env_id=...`` knows them.
"""

from __future__ import annotations

import random
from typing import Any

from gem.envs.reasoning_gym import ReasoningGymEnv
from gem.envs.registration import ENV_REGISTRY, register

GUESS_20 = "game:GuessTheNumber-v0-1to20"
PRODUCTS_1DIGIT = "rg:products-1digit"
SUMS_1DIGIT = "rg:sums-1digit"
ANSWERS = {PRODUCTS_1DIGIT: range(0, 82), SUMS_1DIGIT: range(0, 21)}  # every right answer of each task lies here


class OneDigitTaskEnv(ReasoningGymEnv):
    """A reasoning-gym task with a small config (``TASK``, ``OPTIONS``). The dataset is procedural
    (items are made on access), so its nominal size is large enough that GEM's env never
    regenerates it. Its questions are drawn uniformly with replacement."""

    TASK = ""
    OPTIONS: dict[str, Any] = {}

    def __init__(self, size: int = 1_000_000, seed: int = 42, **_: Any) -> None:
        import reasoning_gym

        super().__init__(self.TASK, size=size, seed=seed)
        self.ds = reasoning_gym.create_dataset(self.TASK, size=size, seed=seed, **self.OPTIONS)
        self.ds_iter = iter(self.ds)
        self.reward_fn = self.ds.score_answer

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """A question drawn through Python's global ``random`` (which the trainer seeds every
        step), not GEM's running iterator, so a resumed run sees the same questions."""
        return super().reset(seed if seed is not None else random.randrange(2**31))


class OneDigitProductsEnv(OneDigitTaskEnv):
    """``rg:products`` with one-digit factors: 100 questions (factors 0-9)."""

    TASK = "products"
    OPTIONS = dict(min_digits=1, max_digits=1)


class OneDigitSumsEnv(OneDigitTaskEnv):
    """``rg:basic_arithmetic`` as the sum of two numbers of 0-10: 121 questions ("Calculate 5 + 3.")."""

    TASK = "basic_arithmetic"
    OPTIONS = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1, operators=("+",), allow_negation=False, allow_parentheses=False)


def register_variants() -> None:
    """Register the variants with GEM (once per process)."""
    if GUESS_20 not in ENV_REGISTRY:
        register(GUESS_20, "gem.envs.game_env.guess_the_number:GuessTheNumberEnv", min_number=1, max_number=20, max_turns=20)
    if PRODUCTS_1DIGIT not in ENV_REGISTRY:
        register(PRODUCTS_1DIGIT, "gemlab.env_variants:OneDigitProductsEnv")
    if SUMS_1DIGIT not in ENV_REGISTRY:
        register(SUMS_1DIGIT, "gemlab.env_variants:OneDigitSumsEnv")
