"""Sampling and training run on separate workers: sampling never waits behind training, each
training client's requests keep their order, a snapshot sampler never changes, and a worker's
lanes take turns (round-robin) while each keeps its own order."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import torch
from tinker import types

from gemlab.step import adam_params
from tests.helpers.local import nudge, sft_datum
from tinker_emulator.futures import SAMPLING, TRAINING, Worker, get_worker, lane, then


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


def test_the_two_copies_share_the_base_weights_but_not_their_adapters(training, prompt):
    """One set of base weights in memory: the sampler's copy has its own modules (its snapshot
    adapter is not in the learner's) over the same weight tensors, which training leaves as they were."""
    snapshot = training.save_weights_and_get_sampling_client().result()
    learner, sampler = dict(training._model.model.named_parameters()), dict(snapshot._model.model.named_parameters())
    base = [name for name in learner if "lora_" not in name]
    assert base and all(learner[name] is sampler[name] for name in base)
    assert {n for n in sampler if snapshot._adapter in n} and not {n for n in learner if snapshot._adapter in n}
    before = {name: learner[name].detach().clone() for name in base}
    nudge(training, prompt)
    assert all(torch.equal(learner[name], before[name]) for name in base)


def test_a_cancelled_wait_does_not_stall_the_batch_it_was_in(training, prompt):
    sampler = training.save_weights_and_get_sampling_client().result()

    async def main() -> list:
        params = types.SamplingParams(max_tokens=6, seed=3)
        tasks = [
            asyncio.ensure_future(sampler.sample_async(types.ModelInput.from_ints(prompt), 1, params)) for _ in range(6)
        ]
        await asyncio.sleep(0)
        tasks[0].cancel()
        return await asyncio.wait_for(asyncio.gather(*tasks[1:]), timeout=30)

    assert all(r.sequences for r in asyncio.run(main()))


def run_blocked(worker: Worker, submit) -> list:
    """The order in which the jobs ``submit(worker, record)`` queues run, all queued while the
    worker is held by a first job (so none starts before every one is queued)."""
    release, ran = threading.Event(), []
    held = worker.submit(lambda: release.wait(60))
    futures = submit(worker, ran.append)
    release.set()
    held.result(timeout=30)
    for future in futures:
        future.result(timeout=30)
    return ran


def test_lanes_take_turns_and_each_keeps_its_order():
    worker = Worker("lanes-test")

    def submit(worker, record):
        queued = [worker.submit(lambda i=i: record(("big", i)), "alice") for i in range(4)]
        queued.append(worker.submit(lambda: record(("small", 0)), "bob"))
        with lane("carol"):  # the caller's lane, as the workshop server's door sets it
            queued += [worker.submit(lambda i=i: record(("carol", i))) for i in range(2)]
        return queued

    ran = run_blocked(worker, submit)
    # bob's one job waits for one of alice's, not all four; carol's come in turn, in order
    assert ran == [("big", 0), ("small", 0), ("carol", 0), ("big", 1), ("carol", 1), ("big", 2), ("big", 3)]
    worker.stop()


def test_a_lane_that_was_idle_goes_before_the_next_turn_of_a_busy_one():
    worker = Worker("rounds-test")
    started, release, ran = threading.Event(), threading.Event(), []
    running = worker.submit(lambda: (ran.append("big 0"), started.set(), release.wait(60)), "alice")
    assert started.wait(30)  # alice has had her turn in this round
    queued = [worker.submit(lambda i=i: ran.append(f"big {i}"), "alice") for i in range(1, 4)]
    queued.append(worker.submit(lambda: ran.append("small"), "bob"))  # sent while big 0 runs
    release.set()
    for future in [running, *queued]:
        future.result(timeout=30)
    # bob waits for the running job only: he has not had his turn in this round, alice has
    assert ran == ["big 0", "small", "big 1", "big 2", "big 3"]
    worker.stop()


def test_one_lane_is_plain_submission_order_and_drain_waits_for_every_lane():
    worker = Worker("fifo-test")
    ran = run_blocked(worker, lambda w, record: [w.submit(lambda i=i: record(i)) for i in range(6)])
    assert ran == list(range(6))
    release, done = threading.Event(), []
    worker.submit(lambda: release.wait(60), "alice")
    for name in ("alice", "bob", "carol"):
        worker.submit(lambda name=name: done.append(name), name)
    drained = threading.Thread(target=worker.drain)
    drained.start()
    release.set()
    drained.join(timeout=30)
    assert not drained.is_alive() and sorted(done) == ["alice", "bob", "carol"]
    worker.stop()
    assert worker.submit(lambda: 1).exception() is not None  # refused after stop


def test_chained_work_keeps_the_lane_it_was_asked_in():
    first, second = Worker("first-test"), Worker("second-test")
    open_first, open_second, ran = threading.Event(), threading.Event(), []
    gate = first.submit(lambda: open_first.wait(60))
    held = second.submit(lambda: open_second.wait(60))
    queued = [second.submit(lambda i=i: ran.append(("alice", i)), "alice") for i in range(2)]
    queued.append(second.submit(lambda: ran.append(("bob", "before")), "bob"))
    with lane("bob"):
        queued.append(then(gate, second, lambda _: ran.append(("bob", "chained"))))
    open_first.set()
    first.drain()  # ``gate``'s callback, on first's thread, has queued the chained job on second
    open_second.set()
    held.result(timeout=30)
    for future in queued:
        future.result(timeout=30)
    # queued from first's thread, the chained job still joins bob's lane, behind bob's own job
    assert ran == [("alice", 0), ("bob", "before"), ("alice", 1), ("bob", "chained")]
    first.stop()
    second.stop()


def test_usable_cores_are_the_affinity_not_the_machines_cores(monkeypatch):
    """Under taskset -c 0,1 on a 16-core machine a pass uses 2 threads, not 4."""
    from tinker_emulator.models import usable_cores

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert usable_cores() == 2


def test_a_large_model_takes_every_core_while_the_other_worker_is_idle(monkeypatch):
    """The synchronous loop: sampling and training take turns, so each large pass gets the cores
    (at most 4) and a decoding step one; while the other worker has work, each takes half;
    $GEMLAB_THREADS wins."""
    import torch

    from tinker_emulator import futures
    from tinker_emulator.models import THREADS_ENV, LoadedModel

    threads = torch.get_num_threads()
    lm = LoadedModel(name="big", model=torch.nn.Linear(1, 1), tokenizer=None, device=torch.device("cpu"), role=TRAINING)
    lm.__dict__["parameter_count"] = 135_000_000
    monkeypatch.delenv(THREADS_ENV, raising=False)
    monkeypatch.setattr("tinker_emulator.models.usable_cores", lambda: 2)
    sampler = Worker(SAMPLING)
    monkeypatch.setitem(futures._workers, SAMPLING, sampler)
    assert lm.cpu_threads == 2
    release = threading.Event()
    running = sampler.submit(release.wait)
    while not sampler.busy:  # the job is queued or running from here on
        pass
    assert lm.cpu_threads == 1
    release.set()
    running.result()
    while sampler.busy:
        release.wait(0.01)
    assert lm.cpu_threads == 2
    with torch.no_grad():
        lm.use_threads(tokens=64)  # a decoding step of 64 rows: one thread
        assert torch.get_num_threads() == 1
        lm.use_threads(tokens=640)  # a long prompt pass: every core
        assert torch.get_num_threads() == 2
        lm.use_threads(tokens=64)
    with torch.enable_grad():
        lm.use_threads(tokens=64)  # a small training pass: its backward is the larger part, every core
        assert torch.get_num_threads() == 2
    monkeypatch.setattr("tinker_emulator.models.usable_cores", lambda: 16)
    assert lm.cpu_threads == 4
    monkeypatch.setenv(THREADS_ENV, "3")
    assert lm.cpu_threads == 3
    lm.__dict__["parameter_count"] = 400_000
    monkeypatch.delenv(THREADS_ENV)
    assert lm.cpu_threads == 1  # the tiny model: one thread, whatever the cores
    sampler.stop()
    torch.set_num_threads(threads)
