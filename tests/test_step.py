"""``gemlab.step``'s contract: prepare (discounted returns, ReBN advantages, subsampling, minibatches),
update (one ``forward_backward`` + ``optim_step`` per minibatch, metrics combined by their names, a
non-finite result refused), the learning-rate schedule, and ``train_step`` end to end on the tiny
backend (sample -> prepare -> update -> metrics, deterministic given the seed)."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from tinker import types

from gemlab import make_config
from gemlab.envs import make_envs
from gemlab.episodes import Episode, RolloutBatch, Transition
from gemlab.step import (
    Inline,
    NonFinite,
    Players,
    StepResult,
    adam_params,
    prepare,
    scheduled_learning_rate,
    train_step,
    update,
)
from gemlab.templates import get_template
from tinker_emulator import TINY, LocalServiceClient


def episode(rewards: list[float], first_token: int = 10) -> Episode:
    """An episode of one turn per reward; each prompt is rendered afresh (no turn extends the one
    before), so every turn becomes its own datum."""
    turns = [
        Transition(
            obs_tokens=[first_token + 2 * i, 4],
            act_tokens=[first_token + 2 * i + 1, 3],
            act_logprobs=[-1.0, -0.5],
            reward=reward,
            done=i == len(rewards) - 1,
        )
        for i, reward in enumerate(rewards)
    ]
    return Episode(transitions=turns)


def small_config(**overrides: Any) -> Any:
    return make_config(
        "laptop", **{"batch_size": 4, "num_env": 2, "gamma": 1.0, "num_minibatches": 1, "seed": 7, **overrides}
    )


def advantages_of(datum: types.Datum) -> list[float]:
    """The nonzero advantages a datum carries (one per action token)."""
    return [a for a in datum.loss_fn_inputs["advantages"].to_torch().tolist() if a != 0.0]


# ----- prepare ----------------------------------------------------------------------------------
def test_advantages_are_rebn_of_the_discounted_returns():
    batch = RolloutBatch([episode([0.0, 1.0]), episode([2.0], first_token=30)])
    prepared = prepare(batch, small_config(gamma=0.5), step=0)
    returns = np.array([0.0 + 0.5 * 1.0, 1.0, 2.0])  # G_t = r_t + gamma * G_{t+1}, per episode
    expected = (returns - returns.mean()) / (returns.std(ddof=1) + 1e-9)
    assert prepared.transitions == [t for e in batch.episodes for t in e.transitions]
    assert prepared.advantages == pytest.approx(expected.tolist())
    # each datum carries its transition's advantage on its action tokens, and nothing on its prompt
    for datum, advantage in zip(prepared.datums, prepared.advantages, strict=True):
        assert advantages_of(datum) == pytest.approx([advantage] * 2)
        assert datum.loss_fn_inputs["advantages"].to_torch()[0] == 0.0


def test_equal_returns_carry_no_signal():
    prepared = prepare(RolloutBatch([episode([1.0]), episode([1.0], first_token=30)]), small_config(), step=0)
    assert prepared.advantages == [0.0, 0.0]


def test_a_large_batch_is_subsampled_to_batch_size_by_the_seed_and_step():
    batch = RolloutBatch([episode([float(r)], first_token=10 + 2 * r) for r in range(10)])
    config = small_config(batch_size=4)
    prepared = prepare(batch, config, step=3)
    everyone = [t for e in batch.episodes for t in e.transitions]
    assert len(prepared.transitions) == 4 == len(prepared.datums)
    assert len({id(t) for t in prepared.transitions}) == 4  # drawn without replacement
    # advantages are normalized over the whole batch first, then subsampled with their transitions
    returns = np.arange(10.0)
    full = (returns - returns.mean()) / (returns.std(ddof=1) + 1e-9)
    assert prepared.advantages == pytest.approx([full[everyone.index(t)] for t in prepared.transitions])
    again = prepare(batch, config, step=3)
    assert [id(t) for t in again.transitions] == [id(t) for t in prepared.transitions]
    draws = {tuple(id(t) for t in prepare(batch, config, step=s).transitions) for s in range(6)}
    assert len(draws) > 1  # another step draws another subsample


def test_minibatches_split_the_datums_once_each():
    batch = RolloutBatch([episode([float(r)], first_token=10 + 2 * r) for r in range(6)])
    one = prepare(batch, small_config(batch_size=6), step=0)
    assert one.minibatches == [[0, 1, 2, 3, 4, 5]]  # one minibatch: the datums in order
    three = prepare(batch, small_config(batch_size=6, num_minibatches=3), step=0)
    assert [len(m) for m in three.minibatches] == [2, 2, 2]
    assert sorted(i for m in three.minibatches for i in m) == list(range(6))
    assert three.minibatches == prepare(batch, small_config(batch_size=6, num_minibatches=3), step=0).minibatches


def test_non_finite_sampler_logprobs_are_refused():
    batch = RolloutBatch([episode([1.0])])
    batch.episodes[0].transitions[0].act_logprobs[1] = math.nan
    with pytest.raises(NonFinite, match="non-finite logprobs"):
        prepare(batch, small_config(), step=0)


# ----- update -----------------------------------------------------------------------------------
@dataclass
class Recording:
    """A training client that records its calls and answers with fixed metrics."""

    loss: float = 1.0
    grad_norm: float = 2.0
    optim_error: Exception | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def forward_backward(self, data: list[types.Datum], loss_fn: str, loss_fn_config: Any = None) -> Any:
        self.calls.append(("forward_backward", (data, loss_fn, loss_fn_config)))
        outputs = [{"logprobs": d.loss_fn_inputs["logprobs"]} for d in data]
        return done(SimpleNamespace(metrics={"loss:sum": self.loss}, loss_fn_outputs=outputs))

    def optim_step(self, params: types.AdamParams) -> Any:
        self.calls.append(("optim_step", params))
        if self.optim_error is not None:
            return failed(self.optim_error)
        return done(SimpleNamespace(metrics={"grad_norm:mean": self.grad_norm * len(self.calls)}))


def done(value: Any) -> Any:
    async def result_async() -> Any:
        return value

    return SimpleNamespace(result_async=result_async)


def failed(error: Exception) -> Any:
    async def result_async() -> Any:
        raise error

    return SimpleNamespace(result_async=result_async)


def test_one_forward_backward_and_optim_step_per_minibatch():
    batch = RolloutBatch([episode([float(r)], first_token=10 + 2 * r) for r in range(6)])
    config = small_config(
        batch_size=6, num_minibatches=3, loss_fn="ppo", learning_rate=1e-3, max_steps=4, lr_schedule="linear"
    )
    prepared = prepare(batch, config, step=1)
    client = Recording()
    outputs, train = asyncio.run(update(client, prepared.datums, prepared.minibatches, config, step=1))
    assert [name for name, _ in client.calls] == ["forward_backward", "optim_step"] * 3
    sent = [args for name, args in client.calls if name == "forward_backward"]
    for (data, loss_fn, loss_fn_config), minibatch in zip(sent, prepared.minibatches, strict=True):
        assert data == [prepared.datums[i] for i in minibatch]
        assert (loss_fn, loss_fn_config) == (config.loss_fn, config.loss_fn_config)
    for _, params in (call for call in client.calls if call[0] == "optim_step"):
        assert params == types.AdamParams(learning_rate=1e-3 * 0.75, beta1=0.9, beta2=0.95, eps=1e-8)
    # each datum gets the output computed for it, whatever minibatch it was in
    assert [o["logprobs"] for o in outputs] == [d.loss_fn_inputs["logprobs"] for d in prepared.datums]
    # ":sum" adds up over the minibatches, the rest average (grad_norm was 4, 8, 12)
    assert train == {"train/loss:sum": 3.0, "train/grad_norm:mean": 8.0}


@pytest.mark.parametrize(
    "client, message",
    [
        (Recording(loss=math.nan), "loss:sum is nan"),
        (Recording(grad_norm=math.inf), "grad_norm:mean is inf"),
        (Recording(optim_error=ValueError("would make the weights non-finite")), "would make the weights non-finite"),
    ],
)
def test_a_non_finite_update_raises(client, message):
    prepared = prepare(RolloutBatch([episode([0.0, 1.0])]), small_config(), step=0)
    with pytest.raises(NonFinite, match=message):
        asyncio.run(update(client, prepared.datums, prepared.minibatches, small_config(), step=0))


@pytest.mark.parametrize(
    "schedule, expected",
    [("constant", [1.0, 1.0, 1.0, 1.0]), ("linear", [1.0, 0.5, 0.0, 0.0]), ("cosine", [1.0, 0.5, 0.0, 0.0])],
)
def test_learning_rate_schedule(schedule, expected):
    config = small_config(learning_rate=0.1, max_steps=2, lr_schedule=schedule)
    assert [scheduled_learning_rate(config, step) for step in range(4)] == pytest.approx(
        [0.1 * m for m in expected], abs=1e-12
    )


def test_adam_params_are_gems():
    assert adam_params(0.01) == types.AdamParams(learning_rate=0.01, beta1=0.9, beta2=0.95, eps=1e-8)


# ----- train_step on the tiny backend -----------------------------------------------------------
STEP_METRICS = {
    "step",
    *(
        "sampler/" + k
        for k in ("episode_return", "success_rate", "num_turns_per_episode", "action_num_tokens", "num_episodes")
    ),
    *("sampler/" + k for k in ("episodes_dropped", "drop_rate", "sample_retries", "token_entropy")),
    *("train/" + k for k in ("kl_sample_train_v1", "kl_sample_train_v2", "logprob_diff_abs", "loss:sum")),
    *("train/" + k for k in ("grad_norm:mean", "learning_rate:mean", "num_transitions", "num_datums", "num_tokens")),
    "async/staleness_mean",
    "async/staleness_max",
    *("time/" + k for k in ("sample", "train", "step", "sample_start", "sample_end", "train_start", "train_end")),
}


def run_one_step(root: Any, seed: int) -> tuple[StepResult, list[torch.Tensor], list[str]]:
    """Step 0 of a fresh tiny run sampled inline; returns what ``train_step`` gave, the LoRA weights
    after it, and the order of the callbacks."""
    config = make_config("laptop", batch_size=8, num_env=2, max_tokens=6, seed=seed)
    service = LocalServiceClient(device="cpu", root=root)
    training = service.create_lora_training_client(base_model=TINY, rank=8, seed=seed).result()
    tokenizer = training.get_tokenizer()
    envs = make_envs(
        config.env_id, config.num_env, seed=config.seed, env_wrappers=config.env_wrappers, tokenizer=tokenizer
    )
    events: list[str] = []

    class Sampler(Inline):
        def weights_updated(self, version: int) -> None:
            events.append(f"weights_updated {version}")

    async def record(result: StepResult) -> None:
        events.append("record")

    sampler = Sampler(
        training, Players(config, envs, tokenizer, get_template(config.template), progress=False), clock=0.0
    )
    before = [p.detach().clone() for p in training._params]
    result = asyncio.run(
        train_step(training, sampler, config, 0, clock=0.0, on_update=lambda: events.append("on_update"), record=record)
    )
    after = [p.detach().clone() for p in training._params]
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))  # the update reached the weights
    return result, after, events


def test_train_step_samples_prepares_updates_and_reports(tmp_path):
    result, _, events = run_one_step(tmp_path / "a", seed=3)
    assert events == ["on_update", "weights_updated 1", "record"]
    assert set(result.metrics) - {"sampler/num_turns_per_won_episode"} == STEP_METRICS
    metrics = result.metrics
    assert metrics["step"] == 0 and metrics["train/num_transitions"] == 8 == len(result.transitions) == len(
        result.outputs
    )
    assert metrics["train/num_datums"] <= 8 and metrics["train/num_tokens"] > 0
    assert metrics["sampler/num_episodes"] == len(result.batch.episodes)
    assert metrics["train/learning_rate:mean"] == pytest.approx(make_config("laptop").learning_rate)
    assert abs(metrics["train/kl_sample_train_v1"]) < 1e-3  # sampled by the weights it trains
    assert all(t.sampler_version == 0 for e in result.batch.episodes for t in e.transitions)
    assert metrics["async/staleness_max"] == 0.0


def test_train_step_is_deterministic_given_the_seed(tmp_path):
    first, weights, _ = run_one_step(tmp_path / "a", seed=5)
    second, again, _ = run_one_step(tmp_path / "b", seed=5)
    untimed = {k: v for k, v in first.metrics.items() if not k.startswith("time/")}
    assert untimed == {k: v for k, v in second.metrics.items() if not k.startswith("time/")}
    assert [t.act_tokens for t in first.transitions] == [t.act_tokens for t in second.transitions]
    for a, b in zip(weights, again, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
