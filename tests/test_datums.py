"""Datum alignment and masks for a transition with known tokens."""

import pytest

from gemlab.datums import policy_gradient_datum, supervised_datum


def test_policy_gradient_datum_alignment():
    obs, act, lps = [10, 11, 12], [20, 21], [-0.5, -0.25]
    datum = policy_gradient_datum(obs, act, lps, advantage=1.5)
    inputs = datum.loss_fn_inputs
    assert datum.model_input.to_ints() == [10, 11, 12, 20]
    assert inputs["target_tokens"].tolist() == [11, 12, 20, 21]
    # targets 11 and 12 are prompt tokens: advantage 0 and logprob 0
    assert inputs["advantages"].tolist() == [0.0, 0.0, 1.5, 1.5]
    assert inputs["logprobs"].tolist() == [0.0, 0.0, -0.5, -0.25]


def test_policy_gradient_datum_single_prompt_token():
    datum = policy_gradient_datum([7], [8, 9], [-1.0, -2.0], advantage=-0.5)
    assert datum.model_input.to_ints() == [7, 8]
    assert datum.loss_fn_inputs["advantages"].tolist() == [-0.5, -0.5]


def test_policy_gradient_datum_rejects_mismatch():
    with pytest.raises(ValueError, match="2 action tokens but 1 logprobs"):
        policy_gradient_datum([1, 2], [3, 4], [-0.1], 1.0)
    with pytest.raises(ValueError, match="at least one"):
        policy_gradient_datum([], [3], [-0.1], 1.0)


def test_supervised_datum_weights_only_answer():
    datum = supervised_datum([1, 2, 3], [4, 5])
    assert datum.model_input.to_ints() == [1, 2, 3, 4]
    assert datum.loss_fn_inputs["target_tokens"].tolist() == [2, 3, 4, 5]
    assert datum.loss_fn_inputs["weights"].tolist() == [0.0, 0.0, 1.0, 1.0]
