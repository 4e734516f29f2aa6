"""An episode's conversation trained as one datum gives the loss, gradients and per-turn logprobs
of its per-turn datums."""

from __future__ import annotations

import pytest
import torch

from gemlab.datums import policy_gradient_datum, policy_gradient_datums, turn_output
from gemlab.episodes import Transition
from tests.helpers.local import grads, nudge
from tinker_emulator import scoring

REPLIES = ["<|im_end|>\n<|im_start|>user\nToo low.<|im_end|>\n<|im_start|>assistant\n",
           "<|im_end|>\n<|im_start|>user\nToo high, try again.<|im_end|>\n<|im_start|>assistant\n"]


def _episodes(tokenizer, prompt):
    """Two episodes of three turns each, every prompt the previous prompt, action and reply."""
    episodes = []
    for e in range(2):
        obs, turns = list(prompt), []
        for t in range(3):
            act = tokenizer.encode(f"\\boxed{{{3 * e + t + 2}}}")
            turns.append(
                Transition(
                    obs_tokens=obs, act_tokens=act, act_logprobs=[-0.7 - 0.1 * t] * len(act), reward=0.0, done=t == 2
                )
            )
            obs = obs + act + tokenizer.encode(REPLIES[(e + t) % 2])
        episodes.append(turns)
    return episodes


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo"])
@pytest.mark.parametrize("share", [False, True])
def test_merged_conversations_train_as_their_turns(training, prompt, monkeypatch, loss_fn, share):
    """loss:sum within 1e-5, every gradient within 1e-5 of the largest, each turn's logprobs within
    1e-5 and its elementwise loss within 1e-6 (other sequence lengths round differently); with the
    shared prompt run once (``share``) too."""
    monkeypatch.setattr(scoring, "worth_sharing", lambda model: share)
    nudge(training, prompt)
    episodes = _episodes(training.get_tokenizer(), prompt)
    turns = [t for episode in episodes for t in episode]
    advantages = [0.5, -1.0, 2.0, 1.5, 0.0, -0.5]
    places = [(e, t) for e in range(2) for t in range(3)]
    merged, placements = policy_gradient_datums(turns, advantages, places)
    assert len(merged) == 2
    per_turn = [
        policy_gradient_datum(t.obs_tokens, t.act_tokens, t.act_logprobs, a)
        for t, a in zip(turns, advantages, strict=True)
    ]

    def run(data):
        out = training.forward_backward(data, loss_fn).result()
        gradients = grads(training)
        for p in training._params:
            p.grad = None
        return out, gradients

    (merged_out, merged_grads), (turn_out, turn_grads) = run(merged), run(per_turn)
    assert merged_out.metrics["loss:sum"] == pytest.approx(turn_out.metrics["loss:sum"], abs=1e-5)
    largest = max(float(g.abs().max()) for g in turn_grads)
    assert largest > 0
    for a, b in zip(merged_grads, turn_grads, strict=True):
        assert float((a - b).abs().max()) <= 1e-5 * largest
    for placement, own in zip(placements, turn_out.loss_fn_outputs, strict=True):
        view = turn_output(merged_out.loss_fn_outputs[placement.datum], placement)
        torch.testing.assert_close(view["logprobs"].to_torch(), own["logprobs"].to_torch(), rtol=0, atol=1e-5)
        torch.testing.assert_close(
            view["elementwise_loss"].to_torch(), own["elementwise_loss"].to_torch(), rtol=0, atol=1e-6
        )
