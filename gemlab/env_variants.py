"""GEM env variants (the reproduction studies use them), registered through GEM's ``register``.

- ``game:GuessTheNumber-v0-1to20``: GEM's GuessTheNumberEnv with its own class defaults (1-20,
  20 turns). Any consistent player wins within 20 turns, so only the discount factor rewards
  winning *fast*: the setting where the gamma study can show something (the easy level's 4 turns
  on 1-10 already force near-bisection to win at all).
- ``game:GuessTheNumber-v0-1to20-7turns``: the same on 1-20 in 7 turns, where bisection pays more
  than on the easy level: it wins every game in 3.70 turns on average, a player guessing at random
  among the numbers the hints allow wins 0.94 in 4.29 (``gemlab.studies.guessing``).
- ``game:GuessTheNumber-v0-easy-wins``: the easy level (1-10, 4 turns) paying for wins only. GEM
  pays a lost game's last guess ``1 - distance / 9``, up to 0.89 against a win's 1, so RL on it
  can learn to land close instead of to win (what SmolLM2 runs did, research/notes/smollm2.md); here a lost
  game pays 0 (a malformed answer still pays GEM's -0.1).
- ``rg:products-1digit``: GEM's reasoning-gym task ``rg:products`` restricted to one-digit factors
  (reasoning-gym's ``ProductsConfig(min_digits=1, max_digits=1)``): a single-turn task whose
  answers (0-81) a 0.4M-parameter model can learn; the stock config has factors of up to 5 digits.
- ``rg:sums-1digit``: GEM's reasoning-gym task ``rg:basic_arithmetic`` restricted to the sum of two
  one-digit numbers (``operators=("+",)``, no negation, no parentheses; reasoning-gym's one-digit
  numbers are 0-10, so the answers are 0-20): a second single-turn task. The stock config mixes
  up to six terms of up to four digits and all four operators.
- ``rg:sums-1digit-train`` and ``rg:sums-1digit-test``: the same 121 sums split in two, so an
  evaluation can use problems a run never trained on. The split is by unordered pair (``3 + 5``
  and ``5 + 3`` fall on the same side): the test side is 64 questions, the train side the other
  57. The test env's reset seed ``s`` gives question ``s % 64``, so 64 consecutive seeds (the
  evaluation set of ``gemlab.evaluate``) play each held-out question once.
- ``rg:diffs-1digit-train`` and ``rg:diffs-1digit-test``: the same for differences ("Calculate
  2 - 7.", answers -10 to 10, ``operators=("-",)``), split by the same unordered pairs (``2 - 7``
  and ``7 - 2`` on one side): a second task with a held-out side.
- ``rg:times-1digit-train`` and ``rg:times-1digit-test``: the same for products ("Calculate 4 * 3.",
  answers 0-100, ``operators=("*",)``).
- ``rg:sums-1digit-train-nonzero`` and ``rg:times-1digit-train-nonzero``: the train sides without
  the 15 questions that have an operand 0 (42 left), on which copying an operand (sums) or
  answering 0 (products) is right: a shortcut that stalled SmolLM2 runs (research/notes/smollm2.md).
- ``rg:sums-to20-train``: every sum of two numbers 0-20 ("Calculate 13 + 7.", the same form and
  grader) except the 64 held-out one-digit ones: 377 questions, too many to learn one by one.
  Tried as ``preset=smollm2``'s training side, it was too hard a start for SmolLM2 (rollout
  success 0.00-0.22 over 10 RL steps, research/notes/smollm2.md); it is there to train on.
- ``math:GSMSymbolic``: GEM's math env on word problems made on this machine
  (``gemlab/offline_math.py``), for GEM's math examples offline; GEM's own ``math:*`` ids load theirs
  from the hub. Registered by the class's path, so importing gemlab does not load ``datasets``.
- ``rg:sums-mix-train``: half its problems from ``rg:sums-1digit-train`` (a start SmolLM2 can
  learn from), half from ``rg:sums-to20-train`` (too many to learn one by one), so that RL on it
  has to learn addition rather than 57 answers; the held-out one-digit sums stay out of both.

- ``math:products-3x2-train`` and ``math:products-3x2-test``: products of a three-digit and a
  two-digit number (``What is 347 * 58?``), asked for as one line of Python that prints the answer;
  a pair belongs to the test side when ``(a + b) % 8 == 0`` (about 10,000 pairs), to the train side
  otherwise, so no held-out problem is ever trained on. The answer counts inside ``\\boxed{}``
  (1.0 right, 0.0 otherwise; one answer ends the episode). SmolLM2-135M cannot multiply these in
  its head (0 of 16); with GEM's python tool (``env_wrappers=python_tool_sandboxed``) it can.
- ``math:products-3x2-notool-train`` and ``math:products-3x2-notool-test``: the same pairs for the
  same reset seeds, asked for the number alone (``What is 347 * 58? Give the number as \\boxed{N}.``):
  the arm without the tool of the tool-use study (``gemlab.studies.definitions``).

Their ids are in ``gemlab.env_ids``. Importing ``gemlab.envs`` registers them all, so ``python -m gemlab.train
env_id=...`` knows them.
"""

from __future__ import annotations

import random
from typing import Any

from gem.core import Env
from gem.envs.game_env.guess_the_number import GuessTheNumberEnv
from gem.envs.reasoning_gym import ReasoningGymEnv
from gem.envs.registration import ENV_REGISTRY, register
from gem.utils.parsing import extract_last_boxed_answer

from gemlab.env_ids import (
    DIFFS_TEST,
    DIFFS_TRAIN,
    GUESS_20,
    GUESS_20_IN_7,
    GUESS_EASY_WINS,
    OFFLINE_MATH,
    PRODUCTS_1DIGIT,
    PRODUCTS_NO_TOOL_TEST,
    PRODUCTS_NO_TOOL_TRAIN,
    PRODUCTS_TEST,
    PRODUCTS_TRAIN,
    SUMS_1DIGIT,
    SUMS_MIX_TRAIN,
    SUMS_TEST,
    SUMS_TO20_TRAIN,
    SUMS_TRAIN,
    TIMES_TEST,
    TIMES_TRAIN,
)

HELD_OUT = 64  # questions on the test side of each split
ANSWERS = {  # every right answer of each task lies here
    PRODUCTS_1DIGIT: range(0, 82),
    SUMS_1DIGIT: range(0, 21),
    SUMS_TRAIN: range(0, 21),
    SUMS_TEST: range(0, 21),
    SUMS_TO20_TRAIN: range(0, 41),
    SUMS_MIX_TRAIN: range(0, 41),
    DIFFS_TRAIN: range(-10, 11),
    DIFFS_TEST: range(-10, 11),
    TIMES_TRAIN: range(0, 101),
    TIMES_TEST: range(0, 101),
}


class WinsOnlyGuessTheNumberEnv(GuessTheNumberEnv):
    """GuessTheNumber whose lost games pay 0: no credit for a last guess close to the number."""

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = super().step(action)
        if truncated and reward > 0:  # out of turns without a win: GEM's closeness credit
            reward = 0.0
        return observation, reward, terminated, truncated, info


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
    OPTIONS = dict(
        min_terms=2,
        max_terms=2,
        min_digits=1,
        max_digits=1,
        operators=("+",),
        allow_negation=False,
        allow_parentheses=False,
    )


class ProductsEnv(Env):
    """``a * b`` for a three-digit ``a`` and a two-digit ``b``, on one side of a fixed split; one
    answer ends the episode. Reset seed ``s`` draws the side's pair from ``random.Random(s)``
    (without a seed, from Python's global ``random``, as the other variants do)."""

    # No worked example: SmolLM2 copies one's numbers (with ``print(12 * 34)`` shown, 0 of 64
    # first turns printed the asked product; without it, 3 of 64 at temperature 0.5)
    QUESTION = (
        "What is {a} * {b}? Do not work it out yourself: write one line of Python that prints it, in a "
        "```python block. "
        "When its result comes back, give that number as \\boxed{{N}}."
    )

    QUESTION_NO_TOOL = "What is {a} * {b}? Give the number as \\boxed{{N}}."

    def __init__(self, side: str = "train", tool: bool = True, **_: Any) -> None:
        super().__init__()
        self.side = side
        self.question = self.QUESTION if tool else self.QUESTION_NO_TOOL
        self.pair = (100, 10)

    def held_out(self, a: int, b: int) -> bool:
        """Whether ``a * b`` is on the test side."""
        return (a + b) % 8 == 0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        rng = random.Random(seed if seed is not None else random.randrange(2**31))
        while True:
            a, b = rng.randint(100, 999), rng.randint(10, 99)
            if self.held_out(a, b) == (self.side == "test"):
                break
        self.pair = (a, b)
        return self.question.format(a=a, b=b), {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        answer = extract_last_boxed_answer(action)
        a, b = self.pair
        correct = answer is not None and answer.strip().lstrip("+").isdigit() and int(answer.strip()) == a * b
        return "", 1.0 if correct else 0.0, True, False, {"correct": correct}

    def sample_random_action(self) -> str:
        return f"\\boxed{{{random.randint(1000, 98901)}}}"


def operands(item: dict[str, Any], operator: str) -> tuple[int, ...]:
    """The numbers of a reasoning-gym ``basic_arithmetic`` item ``a <operator> b``."""
    return tuple(int(n) for n in item["metadata"]["expression"].split(f" {operator} "))


def pair_split(dataset: Any, side: str, operator: str = "+") -> list[dict[str, Any]]:
    """One side (``"train"`` or ``"test"``) of the 121 questions ``a <operator> b`` (a, b in 0-10), as reasoning-gym
    items: the test side
    in a fixed order, the train side in the order ``dataset`` (made from the env's seed) first
    yields them, so a run's problems follow from its seed. Unordered pairs are shuffled with a
    fixed seed and dealt to the test side until it holds ``HELD_OUT`` questions; the rest are the
    train side."""
    items: dict[str, dict[str, Any]] = {}
    index = 0
    while len(items) < 121:  # the procedural set repeats questions; the first ~600 items hold all 121
        item = dataset[index]
        items.setdefault(item["question"], item)
        index += 1
    pairs: dict[tuple[int, ...], list[dict[str, Any]]] = {}
    for item in sorted(items.values(), key=lambda item: item["question"]):
        pairs.setdefault(tuple(sorted(operands(item, operator))), []).append(item)
    order = sorted(pairs)
    random.Random(2510_01051).shuffle(order)
    test: list[dict[str, Any]] = []
    for pair in order:  # doubles (4 + 4) are one question, other pairs two: stop at exactly HELD_OUT
        if len(test) + len(pairs[pair]) <= HELD_OUT:
            test.extend(pairs[pair])
    held = {item["question"] for item in test}
    return test if side == "test" else [item for item in items.values() if item["question"] not in held]


class SplitPairsEnv(OneDigitSumsEnv):
    """One side (``side``) of the split of the 121 questions ``a <operator> b`` (a, b in 0-10,
    reasoning-gym's ``basic_arithmetic``), less those with an operand under ``min_operand``; reset
    seed ``s`` gives the side's question ``s % len``."""

    def __init__(
        self,
        side: str = "train",
        operator: str = "+",
        min_operand: int = 0,
        size: int = 1_000_000,
        seed: int = 42,
        **_: Any,
    ) -> None:
        self.OPTIONS = dict(OneDigitSumsEnv.OPTIONS, operators=(operator,))
        super().__init__(size=size, seed=seed)
        self.items = [
            item for item in pair_split(self.ds, side, operator) if min(operands(item, operator)) >= min_operand
        ]

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """The question ``seed % len(items)`` of this side (a seed drawn through Python's global
        ``random`` when none is given, as ``OneDigitTaskEnv`` does)."""
        seed = seed if seed is not None else random.randrange(2**31)
        self.data = self.items[seed % len(self.items)]
        self.idx += 1
        return self.data["question"], {}


class SumsTo20TrainEnv(SplitPairsEnv):
    """Every sum of two numbers 0-20 but the held-out one-digit ones (377 questions), in
    reasoning-gym's form ("Calculate 13 + 7.", graded by ``basic_arithmetic``'s scorer)."""

    def __init__(self, size: int = 1_000_000, seed: int = 42, **_: Any) -> None:
        super().__init__("test", "+", size=size, seed=seed)  # the held-out sums, left out below
        held = {item["question"] for item in self.items}
        self.items = [
            {"question": question, "answer": str(a + b), "metadata": {"expression": f"{a} + {b}"}}
            for a in range(21)
            for b in range(21)
            if (question := f"Calculate {a} + {b}.") not in held
        ]


class SumsMixTrainEnv(SumsTo20TrainEnv):
    """``rg:sums-1digit-train``'s 57 questions for even reset seeds, ``rg:sums-to20-train``'s 377
    for odd ones: half the problems one-digit, half up to 20 + 20."""

    def __init__(self, size: int = 1_000_000, seed: int = 42, **_: Any) -> None:
        super().__init__(size=size, seed=seed)
        self.one_digit = pair_split(self.ds, "train")

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """The question ``seed // 2`` (modulo its side's size) of the side ``seed``'s parity picks."""
        seed = seed if seed is not None else random.randrange(2**31)
        side = self.one_digit if seed % 2 == 0 else self.items
        self.data = side[seed // 2 % len(side)]
        self.idx += 1
        return self.data["question"], {}


SPLITS = {  # env id: (side, operator, min_operand)
    SUMS_TRAIN: ("train", "+", 0),
    SUMS_TEST: ("test", "+", 0),
    f"{SUMS_TRAIN}-nonzero": ("train", "+", 1),
    DIFFS_TRAIN: ("train", "-", 0),
    DIFFS_TEST: ("test", "-", 0),
    TIMES_TRAIN: ("train", "*", 0),
    TIMES_TEST: ("test", "*", 0),
    f"{TIMES_TRAIN}-nonzero": ("train", "*", 1),
}


def register_variants() -> None:
    """Register the variants with GEM (once per process)."""
    if GUESS_20 not in ENV_REGISTRY:
        register(
            GUESS_20, "gem.envs.game_env.guess_the_number:GuessTheNumberEnv", min_number=1, max_number=20, max_turns=20
        )
    if GUESS_20_IN_7 not in ENV_REGISTRY:
        register(
            GUESS_20_IN_7,
            "gem.envs.game_env.guess_the_number:GuessTheNumberEnv",
            min_number=1,
            max_number=20,
            max_turns=7,
        )
    if GUESS_EASY_WINS not in ENV_REGISTRY:
        register(
            GUESS_EASY_WINS, "gemlab.env_variants:WinsOnlyGuessTheNumberEnv", min_number=1, max_number=10, max_turns=4
        )
    if PRODUCTS_1DIGIT not in ENV_REGISTRY:
        register(PRODUCTS_1DIGIT, "gemlab.env_variants:OneDigitProductsEnv")
    if SUMS_1DIGIT not in ENV_REGISTRY:
        register(SUMS_1DIGIT, "gemlab.env_variants:OneDigitSumsEnv")
    if SUMS_TO20_TRAIN not in ENV_REGISTRY:
        register(SUMS_TO20_TRAIN, "gemlab.env_variants:SumsTo20TrainEnv")
    if SUMS_MIX_TRAIN not in ENV_REGISTRY:
        register(SUMS_MIX_TRAIN, "gemlab.env_variants:SumsMixTrainEnv")
    for env_id, side, tool in (
        (PRODUCTS_TRAIN, "train", True),
        (PRODUCTS_TEST, "test", True),
        (PRODUCTS_NO_TOOL_TRAIN, "train", False),
        (PRODUCTS_NO_TOOL_TEST, "test", False),
    ):
        if env_id not in ENV_REGISTRY:
            register(env_id, "gemlab.env_variants:ProductsEnv", side=side, tool=tool)
    for env_id, (side, operator, min_operand) in SPLITS.items():
        if env_id not in ENV_REGISTRY:
            register(env_id, "gemlab.env_variants:SplitPairsEnv", side=side, operator=operator, min_operand=min_operand)
    if OFFLINE_MATH not in ENV_REGISTRY:
        register(OFFLINE_MATH, "gemlab.offline_math:WordProblemMathEnv")
