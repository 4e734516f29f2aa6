"""Sampling and training run on separate workers: sampling never waits behind training, each
training client's requests keep their order, and a snapshot sampler never changes."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
from tinker import types

from gemlab.step import adam_params
from gemlab.local.futures import SAMPLING, TRAINING, get_worker
from tests.helpers.local import nudge, sft_datum


def logprobs_of(sampler, prompt: list[int]) -> np.ndarray:
    return np.asarray(sampler.compute_logprobs(types.ModelInput.from_ints(prompt)).result()[1:])


def test_sampling_goes_on_while_the_training_worker_is_busy(training, prompt):
    sampler = training.save_weights_and_get_sampling_client().result()
    release = threading.Event()
    busy = get_worker(TRAINING).submit(lambda: release.wait(60))  # training occupied until released
    try:
        response = sampler.sample(types.ModelInput.from_ints(prompt), 2, types.SamplingParams(max_tokens=6, seed=1))
        assert response.result(timeout=30).sequences  # answered although training has not moved
        assert not busy.done()
    finally:
        release.set()
    assert busy.result(timeout=30)


def test_training_requests_keep_their_order_and_the_snapshot_sees_them(training, prompt):
    before = training.save_weights_and_get_sampling_client().result()
    # submitted without waiting: forward_backward, optim_step, then the snapshot
    training.forward_backward([sft_datum(prompt, [5, 6, 7])], "cross_entropy")
    training.optim_step(adam_params(2e-2))
    after = training.save_weights_and_get_sampling_client().result()
    learner = training.forward([sft_datum(prompt, [5, 6, 7])], "cross_entropy").result()
    trained = np.asarray(learner.loss_fn_outputs[0]["logprobs"].tolist())
    scored = logprobs_of(after, prompt + [5, 6, 7])
    np.testing.assert_allclose(scored, trained, atol=1e-5)  # the snapshot holds the stepped weights
    assert np.abs(logprobs_of(before, prompt + [5, 6, 7]) - trained).max() > 1e-3


def test_a_snapshot_never_changes_while_training_goes_on(training, prompt):
    nudge(training, prompt)
    snapshot = training.save_weights_and_get_sampling_client().result()
    first = logprobs_of(snapshot, prompt)
    for _ in range(3):
        nudge(training, prompt)
    np.testing.assert_array_equal(logprobs_of(snapshot, prompt), first)
    assert np.abs(logprobs_of(training.save_weights_and_get_sampling_client().result(), prompt) - first).max() > 1e-3


def test_samplers_run_on_the_sampling_workers_own_model_copy(training):
    snapshot = training.save_weights_and_get_sampling_client().result()
    inflight = training.save_weights_and_get_sampling_client(kind="inflight").result()
    assert snapshot._model.worker is get_worker(SAMPLING) and snapshot._model is not training._model
    assert inflight._model is training._model and inflight._model.worker is get_worker(TRAINING)


def test_a_cancelled_wait_does_not_stall_the_batch_it_was_in(training, prompt):
    sampler = training.save_weights_and_get_sampling_client().result()

    async def main() -> list:
        params = types.SamplingParams(max_tokens=6, seed=3)
        tasks = [asyncio.ensure_future(sampler.sample_async(types.ModelInput.from_ints(prompt), 1, params)) for _ in range(6)]
        await asyncio.sleep(0)
        tasks[0].cancel()
        return await asyncio.wait_for(asyncio.gather(*tasks[1:]), timeout=30)

    assert all(r.sequences for r in asyncio.run(main()))
