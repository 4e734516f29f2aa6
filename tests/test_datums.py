"""Datum alignment and masks for a transition with known tokens, and an episode's turns merged into one datum."""

import pytest

from gemlab.datums import Placement, policy_gradient_datum, policy_gradient_datums, supervised_datum
from gemlab.episodes import Transition


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


def _turn(obs, act, logprobs=None):
    return Transition(
        obs_tokens=list(obs), act_tokens=list(act), act_logprobs=logprobs or [-0.5] * len(act), reward=0.0, done=False
    )


def _conversation(first=(1, 2, 3), turns=3):
    """One episode whose every prompt is the previous prompt, its action, and the env's two tokens."""
    played, obs = [], list(first)
    for t in range(turns):
        act = [10 * (t + 1), 10 * (t + 1) + 1]
        played.append(_turn(obs, act, [-0.1 * (t + 1)] * 2))
        obs = obs + act + [90 + t, 99]
    return played


def test_an_episodes_conversation_is_one_datum_each_action_with_its_own_advantage():
    turns = _conversation()
    datums, placements = policy_gradient_datums(turns, [1.0, 2.0, 3.0], [(0, 0), (0, 1), (0, 2)])
    assert len(datums) == 1
    inputs = datums[0].loss_fn_inputs
    tokens = turns[2].obs_tokens + turns[2].act_tokens
    assert datums[0].model_input.to_ints() == tokens[:-1] and inputs["target_tokens"].tolist() == tokens[1:]
    #        targets: 2  3  10   11   90 99 20   21   91 99 30   31
    assert inputs["advantages"].tolist() == [0, 0, 1.0, 1.0, 0, 0, 2.0, 2.0, 0, 0, 3.0, 3.0]
    assert inputs["logprobs"].tolist() == pytest.approx([0, 0, -0.1, -0.1, 0, 0, -0.2, -0.2, 0, 0, -0.3, -0.3])
    assert placements == [Placement(0, 4, 2), Placement(0, 8, 2), Placement(0, 12, 2)]


def test_turns_that_do_not_extend_the_previous_one_stay_their_own_datums_in_order():
    broken = _conversation()
    broken[2] = _turn([1, 2, 3, 10, 11, 90, 98], [30, 31])  # re-rendered: the env rewrote a token
    other = _conversation(first=(5, 6), turns=2)
    turns = [other[1], broken[2], broken[0], other[0], broken[1]]  # subsampled order
    places = [(1, 1), (0, 2), (0, 0), (1, 0), (0, 1)]
    datums, placements = policy_gradient_datums(turns, [1.0] * 5, places)
    # datums in the order of their first turn in `turns`: other's episode, broken's last turn, broken's first two
    assert [d.model_input.length for d in datums] == [
        len(other[1].obs_tokens) + 1,
        len(broken[2].obs_tokens) + 1,
        len(broken[1].obs_tokens) + 1,
    ]
    assert [p.datum for p in placements] == [0, 1, 2, 0, 2]
    alone = policy_gradient_datums([broken[2]], [1.0], [(0, 0)])[0][0]
    assert (
        alone.model_input.to_ints()
        == policy_gradient_datum(
            broken[2].obs_tokens, broken[2].act_tokens, broken[2].act_logprobs, 1.0
        ).model_input.to_ints()
    )


def test_a_step_prepares_one_datum_per_conversation_and_per_turn_otherwise():
    from gemlab import make_config
    from gemlab.episodes import Episode, RolloutBatch
    from gemlab.step import prepare

    episodes = [Episode(transitions=_conversation(first=(1, 2, 3 + e))) for e in range(4)]
    # breaks at turn 3
    episodes.append(Episode(transitions=[_turn([7, 8], [9]), _turn([7, 8, 9, 1], [2]), _turn([6], [5])]))
    config = make_config("laptop", batch_size=15, num_env=5)
    prepared = prepare(RolloutBatch(episodes=episodes), config, step=0)
    assert len(prepared.transitions) == 15 and len(prepared.datums) == 6
    assert sorted(len(m) for m in prepared.minibatches) == [6]
    lengths = sorted(d.model_input.length for d in prepared.datums)
    assert lengths == [1, 4, 12, 12, 12, 12]  # model inputs: every token but the last
