"""Rollout logic with scripted sampling clients: turns, tokens, rewards, and counted drops."""

import asyncio

import numpy as np

import pytest
from tinker import types

from gemlab.envs import make_envs
from gemlab.local.tiny import load_tiny_tokenizer
from gemlab.rollout import collect_batch, collect_episode, end_of_turn_ids
from gemlab.templates import get_template

TOKENIZER = load_tiny_tokenizer()
TEMPLATE = get_template("qwen3_game")


class ScriptedSampler:
    """Answers every prompt with the next guess of a fixed list, as a sampling client would."""

    def __init__(self, guesses, fail_on=()):
        self.guesses, self.fail_on, self.calls, self.prompts = list(guesses), set(fail_on), 0, []

    async def sample_async(self, prompt, num_samples, sampling_params):
        self.calls += 1
        self.prompts.append(prompt.to_ints())
        if self.calls in self.fail_on:
            raise ConnectionError(f"sampler down on call {self.calls}")
        assert sampling_params.stop == end_of_turn_ids(TOKENIZER)
        text = f"\\boxed{{{self.guesses[(self.calls - 1) % len(self.guesses)]}}}"
        tokens = TOKENIZER.encode(text, add_special_tokens=False) + end_of_turn_ids(TOKENIZER)
        sequence = types.SampledSequence(stop_reason="stop", tokens_np=np.array(tokens), logprobs_np=np.full(len(tokens), -0.5), sequence_id=0)
        return types.SampleResponse(sequences=[sequence])


def _play(guesses):
    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    sampler = ScriptedSampler(guesses)
    episode = asyncio.run(collect_episode(sampler, env, tokenizer=TOKENIZER, template=TEMPLATE, max_tokens=16))
    return env, sampler, episode


def test_episode_records_tokens_logprobs_and_rewards():
    env, sampler, episode = _play([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    target = env.unwrapped.game_number
    assert episode.num_turns == min(target, 4)
    assert episode.won == (target <= 4)
    first = episode.transitions[0]
    assert first.obs_tokens == sampler.prompts[0] == TEMPLATE.render(first.observation, TOKENIZER)
    assert first.action == "\\boxed{1}" + TOKENIZER.decode(end_of_turn_ids(TOKENIZER))  # decoded as GEM does: plainly
    assert len(first.act_logprobs) == len(first.act_tokens)
    assert [t.done for t in episode.transitions][-1] is True
    # the concat wrapper shows the earlier hints in the next prompt
    if episode.num_turns > 1:
        assert "you guessed 1" in episode.transitions[1].observation


def test_invalid_format_ends_episode_with_penalty():
    class Rambler(ScriptedSampler):
        async def sample_async(self, prompt, num_samples, sampling_params):
            tokens = TOKENIZER.encode("no idea", add_special_tokens=False)
            seq = types.SampledSequence(stop_reason="length", tokens_np=np.array(tokens), logprobs_np=np.full(len(tokens), -1.0), sequence_id=0)
            return types.SampleResponse(sequences=[seq])

    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    episode = asyncio.run(collect_episode(Rambler([]), env, tokenizer=TOKENIZER, template=TEMPLATE, max_tokens=4))
    assert episode.num_turns == 1
    assert episode.transitions[0].reward == pytest.approx(-0.1)
    assert not episode.won


def test_batch_reaches_min_transitions_and_counts_drops():
    envs = make_envs("game:GuessTheNumber-v0-easy", 4, seed=1)
    sampler = ScriptedSampler([5, 3, 8, 1], fail_on={1})
    batch = asyncio.run(collect_batch(sampler, envs, tokenizer=TOKENIZER, template=TEMPLATE, min_transitions=10, max_tokens=16))
    assert batch.num_transitions >= 10
    assert batch.num_dropped == 1
    assert "sampler down on call 1" in batch.errors[0]


def test_batch_raises_when_every_episode_fails():
    envs = make_envs("game:GuessTheNumber-v0-easy", 2, seed=1)
    sampler = ScriptedSampler([5], fail_on={1, 2})
    with pytest.raises(RuntimeError, match="every episode of a rollout round failed.*sampler down"):
        asyncio.run(collect_batch(sampler, envs, tokenizer=TOKENIZER, template=TEMPLATE, min_transitions=4, max_tokens=16))
