"""The tinker-atropos loop (gemlab/atropos/loop.py) with atroposlib unmodified: an Atropos
environment written in Atropos's own style (examples/atropos_guess_env.py, no gemlab import)
collects multi-turn games through ``ManagedServer`` against gemlab's ``/generate``, in SGLang's and
vLLM's dialects, behind an API key; gemlab trains on the scored groups and serves the new weights."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from gemlab.atropos.loop import group_episodes, train, turns
from gemlab.config import make_config
from gemlab.openai_endpoint import BackgroundServer, Limits, Recorder, SamplerSlot, create_app
from tinker_emulator import TINY_CHAT, LocalServiceClient
from tinker_emulator.models import model_source

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "atropos_guess_env.py"
KEY = "sk-room-7"


def load_example():
    spec = importlib.util.spec_from_file_location("atropos_guess_env", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_env(url: str, server_type: str, group_size: int = 3, seed: int = 0):
    example = load_example()
    folder = str(model_source(TINY_CHAT)[0])  # the tokenizer, by path: nothing from the hub
    config = example.GuessConfig(group_size=group_size, use_wandb=False, tokenizer_name=folder, seed=seed)
    server = APIServerConfig(
        model_name=TINY_CHAT,
        base_url=url,
        api_key=KEY,
        server_type=server_type,
        tokenizer_name=folder,
        health_check=False,
    )
    return example.GuessNumberEnv(config, [server])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> LocalServiceClient:
    return LocalServiceClient(device="cpu", root=tmp_path_factory.mktemp("atropos"))


def test_turns_are_the_runs_the_model_wrote() -> None:
    assert turns([-100, -100, 5, 6, -100, 7, -100, 8, 9]) == [(2, 4), (5, 6), (7, 9)]
    assert turns([-100, -100]) == [] and turns([]) == []


def test_a_scored_group_becomes_one_episode_per_sequence_with_a_transition_per_turn() -> None:
    group = {
        "tokens": [[1, 2, 3, 4, 5, 6, 7], [1, 2, 9]],
        "masks": [[-100, -100, 3, 4, -100, -100, 7], [-100, -100, 9]],
        "inference_logprobs": [[1.0, 1.0, -0.1, -0.2, 1.0, 1.0, -0.3], [1.0, 1.0, -0.4]],
        "scores": [1.0, 0.0],
    }
    first, second = group_episodes(group, 5)
    assert [(t.obs_tokens, t.act_tokens, t.act_logprobs) for t in first.transitions] == [
        ([1, 2], [3, 4], [-0.1, -0.2]),
        ([1, 2, 3, 4, 5, 6], [7], [-0.3]),
    ]
    assert [t.reward for t in first.transitions] == [0.0, 1.0] and first.transitions[-1].done
    assert second.total_reward == 0.0 and first.group == second.group == (5, 0)
    with pytest.raises(ValueError, match="inference_logprobs"):
        group_episodes({**group, "inference_logprobs": None}, 0)


@pytest.mark.parametrize("server_type", ["sglang", "vllm"])
def test_managed_server_tracks_every_turn_as_the_endpoint_sampled_it(service, server_type: str) -> None:
    sampler = service.create_sampling_client(base_model=TINY_CHAT).result()
    recorder = Recorder()
    app = create_app(
        SamplerSlot(sampler, version=4), model_name=TINY_CHAT, recorder=recorder, limits=Limits(api_key=KEY)
    )
    with BackgroundServer(app) as server:
        env = make_env(server.url, server_type)

        async def one_group():
            await env.setup()
            return await env.collect_trajectories(await env.get_next_item())

        group, backlog = asyncio.run(one_group())
    assert backlog == [] and len(group["tokens"]) == 3
    requests = recorder.records()
    # all through /generate
    assert len(requests) >= 3 and all(r.sampler_version == 4 and r.id.startswith("gen-") for r in requests)
    for tokens, mask, logprobs, messages in zip(
        group["tokens"], group["masks"], group["inference_logprobs"], group["messages"], strict=True
    ):
        replies = [m for m in messages if m["role"] == "assistant"]
        spans = turns(mask)
        assert len(spans) == len(replies) >= 1  # one written run per reply
        for start, end in spans:  # each turn is exactly one request's prompt and sampled tokens
            match = [
                r
                for r in requests
                if r.prompt_token_ids == tokens[:start] and r.choices[0].token_ids == tokens[start:end]
            ]
            assert match, f"turn {start}:{end} is not a sample the endpoint drew"
            assert logprobs[start:end] == match[0].choices[0].logprobs
        assert all(lp == 1.0 for lp, m in zip(logprobs, mask, strict=True) if m == -100)  # atroposlib's filler


@pytest.mark.slow
@pytest.mark.parametrize("max_staleness", [0, 1])
def test_the_loop_trains_on_the_groups_and_serves_the_new_weights(service, max_staleness: int) -> None:
    training = CallLog(service.create_lora_training_client(base_model=TINY_CHAT, rank=8, seed=0).result())
    slot = SamplerSlot(training.save_weights_and_get_sampling_client().result())
    training.calls.clear()
    config = make_config(
        "laptop",
        model_name=TINY_CHAT,
        advantage="grpo",
        group_size=4,
        batch_size=256,
        max_staleness=max_staleness,
        learning_rate=2e-3,
    )
    with BackgroundServer(create_app(slot, model_name=TINY_CHAT, limits=Limits(api_key=KEY))) as server:
        env = make_env(server.url, "sglang", group_size=4)

        async def run():
            await env.setup()
            return await train(env, training, slot, config, steps=3, groups_per_step=2)

        rows = asyncio.run(run())
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert all(row["sampler/num_episodes"] == 8 for row in rows)
    assert all(row["train/num_transitions"] >= 8 for row in rows)  # every turn of every game
    assert all(row["async/staleness_max"] <= max_staleness for row in rows)
    if max_staleness == 0:  # sampled by the weights being trained: the learner scores the very same tokens
        assert all(row["train/logprob_diff_abs"] < 1e-4 for row in rows)
    else:
        assert rows[-1]["async/staleness_max"] == 1  # the producer ran a step ahead
    assert slot.get()[1] == 3  # the endpoint now serves the weights after 3 steps
    # every snapshot of version v is asked for after exactly v optimizer steps (never after a later one)
    snapshots = [
        training.calls[:i].count("optim_step")
        for i, call in enumerate(training.calls)
        if call == "save_weights_and_get_sampling_client"
    ]
    assert snapshots == [0, 1, 2, 3]


class CallLog:
    """A training client that notes the order of its calls."""

    def __init__(self, client) -> None:
        self.client, self.calls = client, []

    def __getattr__(self, name: str):
        method = getattr(self.client, name)

        def call(*args, **kwargs):
            self.calls.append(name)
            return method(*args, **kwargs)

        return call
