"""The env variants gemlab registers: the products tool task's split and its grading."""

from gemlab.env_variants import (
    PRODUCTS_NO_TOOL_TEST,
    PRODUCTS_NO_TOOL_TRAIN,
    PRODUCTS_TEST,
    PRODUCTS_TRAIN,
    ProductsEnv,
)
from gemlab.envs import make_envs


def _pairs(env_id: str, seeds: range) -> set[tuple[int, int]]:
    env = make_envs(env_id, 1, env_wrappers="")[0]
    pairs = set()
    for seed in seeds:
        env.reset(seed=seed)
        pairs.add(env.unwrapped.pair)
    return pairs


def test_products_are_three_digit_by_two_digit_and_the_sides_never_share_a_pair():
    train, test = _pairs(PRODUCTS_TRAIN, range(400)), _pairs(PRODUCTS_TEST, range(400))
    assert not train & test
    assert all(100 <= a <= 999 and 10 <= b <= 99 for a, b in train | test)
    assert all((a + b) % 8 == 0 for a, b in test) and all((a + b) % 8 for a, b in train)
    assert len(test) > 350  # the held-out side is large: 64 evaluation problems are all different


def test_a_reset_seed_is_one_problem_and_only_the_boxed_product_pays():
    env = ProductsEnv(side="test")
    first, _ = env.reset(seed=7)
    assert env.reset(seed=7)[0] == first
    a, b = env.pair
    assert first.startswith(f"What is {a} * {b}?")
    assert env.step(f"It is \\boxed{{{a * b}}}")[1:3] == (1.0, True)
    env.reset(seed=7)
    assert env.step(f"{a * b}")[1] == 0.0  # not boxed
    env.reset(seed=7)
    assert env.step(f"\\boxed{{{a * b + 1}}}")[1] == 0.0


def test_the_no_tool_variant_asks_the_same_products_for_the_number_alone():
    for with_tool, without in ((PRODUCTS_TRAIN, PRODUCTS_NO_TOOL_TRAIN), (PRODUCTS_TEST, PRODUCTS_NO_TOOL_TEST)):
        assert _pairs(with_tool, range(100)) == _pairs(without, range(100))  # seed s: one problem in both arms
    env = make_envs(PRODUCTS_NO_TOOL_TEST, 1, env_wrappers="")[0]
    question, _ = env.reset(seed=3)
    a, b = env.unwrapped.pair
    assert question == f"What is {a} * {b}? Give the number as \\boxed{{N}}." and "python" not in question.lower()
    assert env.step(f"\\boxed{{{a * b}}}")[1] == 1.0
