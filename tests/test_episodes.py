"""Rollout logic with scripted sampling clients: turns, tokens, rewards, and counted drops."""

import asyncio
import gc
import weakref

import numpy as np
import pytest
from tinker import types

from gemlab.envs import make_envs
from gemlab.episodes import Prompting, collect_batch, collect_episode, end_of_turn_ids
from gemlab.templates import get_template
from tests.helpers.scripted import TEMPLATE, TOKENIZER, ScriptedSampler


def _play(guesses):
    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    sampler = ScriptedSampler(guesses)
    episode = asyncio.run(collect_episode(sampler, env, Prompting(TOKENIZER, TEMPLATE, max_tokens=16)))
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
        async def sample(self, prompt, num_samples, sampling_params):
            tokens = TOKENIZER.encode("no idea", add_special_tokens=False)
            seq = types.SampledSequence(
                stop_reason="length", tokens_np=np.array(tokens), logprobs_np=np.full(len(tokens), -1.0), sequence_id=0
            )
            return types.SampleResponse(sequences=[seq])

    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    episode = asyncio.run(collect_episode(Rambler([]), env, Prompting(TOKENIZER, TEMPLATE, max_tokens=4)))
    assert episode.num_turns == 1
    assert episode.transitions[0].reward == pytest.approx(-0.1)
    assert not episode.won


def _batch(sampler, num_env, min_transitions, **kwargs):
    envs = make_envs("game:GuessTheNumber-v0-easy", num_env, seed=1)
    return asyncio.run(
        collect_batch(
            sampler, envs, Prompting(TOKENIZER, TEMPLATE, max_tokens=16), min_transitions=min_transitions, **kwargs
        )
    )


def test_failed_request_is_retried_not_dropped():
    batch = _batch(ScriptedSampler([5, 3, 8, 1], fail_on={1}), 4, 10, retry_delays=(0,))
    assert batch.num_transitions >= 10
    assert (batch.num_dropped, batch.num_retries, batch.drop_rate) == (0, 1, 0.0)


def test_batch_reaches_min_transitions_and_counts_drops():
    # env 0's first request is call 1; with one retry it is sent again as call 5 (after envs 1-3)
    batch = _batch(ScriptedSampler([5, 3, 8, 1], fail_on={1, 5}), 4, 10, retry_delays=(0,))
    assert batch.num_transitions >= 10
    assert (batch.num_dropped, batch.num_retries) == (1, 1)
    assert "sampler down on call 5" in batch.errors[0]
    assert batch.drop_rate == 1 / (len(batch.episodes) + 1)


def test_batch_raises_when_every_episode_fails():
    sampler = ScriptedSampler([5], fail_on={1, 2, 3, 4})
    with pytest.raises(RuntimeError, match="every episode of a rollout round failed.*sampler down"):
        _batch(sampler, 2, 4, retry_delays=(0,))


def test_requests_go_out_in_env_order_whatever_the_timing():
    """Lockstep turns: the backend sees the same requests in the same order, however long each
    answer takes, so its batches (and float rounding) do not depend on timing."""

    class Slow(ScriptedSampler):
        def __init__(self, delays):
            super().__init__([5, 3, 8, 1, 9, 2])
            self.delays = delays

        async def sample(self, prompt, num_samples, sampling_params):
            await asyncio.sleep(self.delays[self.calls % len(self.delays)])
            return await super().sample(prompt, num_samples, sampling_params)

    rng = np.random.default_rng(0)
    orders = []
    for _ in range(2):
        sampler = Slow(list(rng.uniform(0, 0.01, size=7)))
        _batch(sampler, 4, 12)
        orders.append(sampler.prompts)
    assert orders[0] == orders[1]


def test_the_sampling_client_is_freed_when_the_batch_is_played_without_the_cycle_collector():
    """When ``collect_batch`` returns, nothing of it holds the sampling client: a snapshot sampler (and
    the keys and values it keeps for later turns, about 0.5 GB for a tool step of SmolLM2) is freed
    there and then, not whenever Python's cycle collector next runs (which was after the update)."""
    sampler = ScriptedSampler([5, 3, 8, 1, 9, 2])
    freed = weakref.ref(sampler)
    gc.collect()
    gc.disable()
    try:
        batch = _batch(sampler, 4, 8)
        del sampler
        assert freed() is None, [type(r).__name__ for r in gc.get_referrers(freed())]
    finally:
        gc.enable()
    assert batch.num_transitions >= 8


def test_envs_that_step_in_a_thread_step_at_the_same_time():
    """An env whose step waits on a process (GEM's sandboxed python tool: ``steps_in_a_thread``) is
    stepped off the event loop, so the episodes' steps overlap: two steps that each wait for the
    other meet at a barrier. Stepped one after another, the first waits alone and the barrier breaks."""
    import threading

    from gemlab.episodes import play_episode

    barrier = threading.Barrier(2, timeout=20)

    class WaitsForTheOther:
        steps_in_a_thread = True

        def reset(self, seed=None):
            return "say anything", {}

        def step(self, action):
            barrier.wait()  # BrokenBarrierError unless the other episode's step runs meanwhile
            return "done", 1.0, True, False, {}

    async def both():
        return await asyncio.gather(
            *(play_episode(WaitsForTheOther(), lambda observation: "hi", env_index=i) for i in range(2))
        )

    episodes = asyncio.run(both())
    assert [e.total_reward for e in episodes] == [1.0, 1.0]


# ----- the one episode loop, played by other policies -----------------------------------------
def test_a_text_function_plays_the_same_loop_without_an_event_loop():
    from gemlab.episodes import play_episode_now

    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    low, high = [1], [10]

    def bisect(observation: str) -> str:  # reads GEM's last hint from the observation
        hints = [line for line in observation.split("\n") if line.startswith("At turn")]
        if hints and "higher than" in hints[-1]:
            low[0] = guesses[-1] + 1
        elif hints and "lower than" in hints[-1]:
            high[0] = guesses[-1] - 1
        guesses.append((low[0] + high[0]) // 2)
        return f"\\boxed{{{guesses[-1]}}}"

    guesses: list[int] = []
    episode = play_episode_now(env, bisect)
    assert episode.won and 1 <= episode.num_turns <= 4
    assert [t.action for t in episode.transitions] == [f"\\boxed{{{g}}}" for g in guesses]
    assert all(t.obs_tokens == [] and t.act_tokens == [] for t in episode.transitions)


def test_max_turns_cuts_an_episode_and_a_waiting_policy_is_refused_without_a_loop():
    from gemlab.episodes import play_episode, play_episode_now

    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
    def wrong(observation: str) -> str:  # a valid guess that is never the secret
        return f"\\boxed{{{env.unwrapped.game_number % 10 + 1}}}"

    assert play_episode_now(env, wrong, max_turns=2).num_turns == 2

    async def slow(observation: str) -> str:
        await asyncio.sleep(0)
        return wrong(observation)

    with pytest.raises(RuntimeError, match="use `await play_episode"):
        play_episode_now(env, slow)
    assert asyncio.run(play_episode(env, slow, max_turns=3)).num_turns == 3


def test_the_progress_bar_ends_full_when_whole_episodes_overshoot_the_batch():
    from tqdm import tqdm

    with tqdm(total=3, disable=False, file=open("/dev/null", "w")) as bar:
        batch = _batch(ScriptedSampler([5, 3, 8, 1]), 4, 3, progress=bar)
        assert batch.num_transitions > 3  # four games of several turns each
        assert bar.n == bar.total == batch.num_transitions  # not "n/?" past the total


def test_a_request_in_flight_survives_the_garbage_collector():
    """asyncio's loop holds tasks only weakly: a send task waiting on a future that only it holds
    was collected with that future by a full GC pass, and its episode then waited forever (a
    step that never ended). The rounds keep their sends alive until they finish."""
    waits: list[weakref.ref] = []

    class OnlyWeaklyHeld(ScriptedSampler):
        async def sample(self, prompt, num_samples, sampling_params):
            answer = asyncio.get_running_loop().create_future()
            waits.append(weakref.ref(answer))  # the server side knows the request only weakly
            await answer
            return await super().sample(prompt, num_samples, sampling_params)

    async def main():
        env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0)[0]
        playing = asyncio.ensure_future(
            collect_batch(
                OnlyWeaklyHeld([1, 2, 3, 4]), [env], Prompting(TOKENIZER, TEMPLATE, max_tokens=16), min_transitions=1
            )
        )
        answered = 0
        while not playing.done():  # answer each turn's request after a full GC pass
            if len(waits) > answered:
                gc.collect()
                answer = waits[answered]()
                assert answer is not None, "a request in flight was garbage-collected"
                answer.set_result(None)
                answered += 1
            await asyncio.sleep(0)
        return playing.result(), answered

    batch, answered = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert answered == batch.episodes[0].num_turns >= 1


def test_a_continuing_template_makes_each_prompt_extend_the_last_prompt_and_action():
    """With ``chat_turns`` and an env that sends only what is new, turn t+1's prompt begins with
    turn t's prompt and action token for token (what the KV cache and merged datums rely on)."""
    env = make_envs("game:GuessTheNumber-v0-easy", 1, seed=0, env_wrappers="")[0]
    prompting = Prompting(TOKENIZER, get_template("chat_turns"), max_tokens=8)
    for reset_seed in range(20):  # a game whose number is not the first guess: several turns
        episode = asyncio.run(
            collect_episode(ScriptedSampler([1, 2, 3, 4]), env, prompting, seed=0, reset_seed=reset_seed)
        )
        if episode.num_turns >= 3:
            break
    assert episode.num_turns >= 3
    for before, after in zip(episode.transitions, episode.transitions[1:], strict=False):
        history = before.obs_tokens + before.act_tokens
        assert after.obs_tokens[: len(history)] == history
        assert TOKENIZER.decode(after.obs_tokens[len(history) :]).startswith("\n<|im_start|>user\n" + after.observation)
