"""Sampling: logprobs agree with training, temperature and stop semantics, seeds, and
concurrent requests batched into one generation."""

from __future__ import annotations

import asyncio
import gc

import pytest
import torch
from tinker import types

from tests.helpers.local import nudge, rl_datum
from tinker_emulator import TINY, lora, sampling_client


def params(**kwargs) -> types.SamplingParams:
    return types.SamplingParams(**{"max_tokens": 12, "stop": [], **kwargs})


@pytest.fixture
def trained(training, prompt):
    """A run with non-zero LoRA weights and a snapshot sampler of them."""
    nudge(training, prompt)
    return training, training.save_weights_and_get_sampling_client().result()


def test_sampler_logprobs_equal_training_logprobs(trained, prompt):
    training, sampling = trained
    response = sampling.sample(types.ModelInput.from_ints(prompt), 4, params(max_tokens=16, seed=3)).result()
    data = [rl_datum(prompt, s.tokens, s.logprobs, 1.0) for s in response.sequences]
    outputs = training.forward(data, "importance_sampling").result().loss_fn_outputs
    for seq, out in zip(response.sequences, outputs, strict=True):
        learner = out["logprobs"].to_torch()[-len(seq.tokens) :]
        sampler_lp = torch.tensor(seq.logprobs)
        torch.testing.assert_close(learner, sampler_lp, rtol=0, atol=1e-4)
        assert abs(float((sampler_lp - learner).mean())) < 1e-5  # on-policy KL estimate ~ 0


def test_compute_logprobs_and_prompt_logprobs_equal_training(trained, prompt):
    training, sampling = trained
    scored = sampling.compute_logprobs(types.ModelInput.from_ints(prompt)).result()
    assert scored[0] is None and len(scored) == len(prompt)
    learner = training.forward(
        [rl_datum(prompt[:1], prompt[1:], [0.0] * (len(prompt) - 1), 0.0)], "importance_sampling"
    )
    expected = learner.result().loss_fn_outputs[0]["logprobs"].to_torch()
    torch.testing.assert_close(torch.tensor(scored[1:]), expected, rtol=0, atol=1e-5)
    response = sampling.sample(
        types.ModelInput.from_ints(prompt), 1, params(max_tokens=2), include_prompt_logprobs=True
    ).result()
    assert response.prompt_logprobs[0] is None
    torch.testing.assert_close(torch.tensor(response.prompt_logprobs[1:]), torch.tensor(scored[1:]))
    last = sampling.compute_logprobs(types.ModelInput.from_ints(prompt), prompt_logprobs_last_n=3).result()
    assert last[:-3] == [None] * (len(prompt) - 3) and last[-3:] == scored[-3:]


def test_logprobs_are_those_of_the_tempered_distribution(trained, prompt):
    _, sampling = trained
    response = sampling.sample(
        types.ModelInput.from_ints(prompt), 1, params(max_tokens=6, temperature=0.6, seed=1)
    ).result()
    seq = response.sequences[0]
    with lora.active(sampling._model, sampling._adapter) as model, torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + seq.tokens])).logits[0, len(prompt) - 1 : -1]
    tempered = torch.log_softmax(logits / 0.6, -1).gather(-1, torch.tensor(seq.tokens)[:, None])[:, 0]
    torch.testing.assert_close(torch.tensor(seq.logprobs), tempered, rtol=0, atol=1e-4)


def test_greedy_top_k_one_and_tiny_top_p_agree(trained, prompt):
    _, sampling = trained
    model_input = types.ModelInput.from_ints(prompt)
    greedy = [
        sampling.sample(model_input, 1, params(temperature=0.0, seed=s)).result().sequences[0].tokens for s in (1, 2)
    ]
    top_k = sampling.sample(model_input, 1, params(top_k=1, seed=5)).result().sequences[0].tokens
    top_p = sampling.sample(model_input, 1, params(top_p=1e-6, seed=6)).result().sequences[0].tokens
    assert greedy[0] == greedy[1] == top_k == top_p


def test_seeds_make_sampling_deterministic(service, trained, prompt):
    training, sampling = trained
    model_input = types.ModelInput.from_ints(prompt)
    a = sampling.sample(model_input, 3, params(seed=42)).result()
    b = sampling.sample(model_input, 3, params(seed=42)).result()
    c = sampling.sample(model_input, 3, params(seed=43)).result()
    tokens = lambda r: [s.tokens for s in r.sequences]  # noqa: E731
    assert tokens(a) == tokens(b) != tokens(c)
    assert len({tuple(t) for t in tokens(a)}) == 3  # the samples of one request differ
    # without a seed, a fresh client of the same weights repeats the same sequence of draws
    path = training.save_weights_for_sampler("seedless").result().path
    first = [service.create_sampling_client(model_path=path).result() for _ in range(2)]
    runs = [[c.sample(model_input, 1, params()).result().sequences[0].tokens for _ in range(2)] for c in first]
    assert runs[0] == runs[1] and runs[0][0] != runs[0][1]


def test_concurrent_requests_run_as_one_batch(monkeypatch, trained, prompt):
    _, sampling = trained
    calls = []
    real_generate = sampling_client.generate

    def counting(model, rows, *args):
        calls.append(len(rows))
        return real_generate(model, rows, *args)

    monkeypatch.setattr(sampling_client, "generate", counting)
    prompts = [prompt[: 10 + i % 7] for i in range(32)]

    async def concurrent():
        return await asyncio.gather(
            *[sampling.sample_async(types.ModelInput.from_ints(p), 1, params(seed=i)) for i, p in enumerate(prompts)]
        )

    batched = asyncio.run(concurrent())
    assert calls == [32]
    alone = [sampling.sample(types.ModelInput.from_ints(p), 1, params(seed=i)).result() for i, p in enumerate(prompts)]
    assert calls == [32] + [1] * 32
    for x, y in zip(batched, alone, strict=True):
        assert x.sequences[0].tokens == y.sequences[0].tokens
        torch.testing.assert_close(x.sequences[0].logprobs, y.sequences[0].logprobs, rtol=0, atol=1e-4)


def test_blocking_result_inside_an_event_loop_does_not_hang(trained, prompt):
    """As in a Jupyter cell, where a loop runs while synchronous code calls .result()."""
    _, sampling = trained

    async def blocking_call():
        return sampling.sample(types.ModelInput.from_ints(prompt), 1, params(max_tokens=3)).result(timeout=60)

    assert len(asyncio.run(blocking_call()).sequences[0].tokens) == 3


def test_stop_token_is_included_and_reported(trained, prompt):
    _, sampling = trained
    model_input = types.ModelInput.from_ints(prompt)
    free = sampling.sample(model_input, 1, params(temperature=0.0)).result().sequences[0]
    assert free.stop_reason == "length" and len(free.tokens) == 12
    stop_token = free.tokens[3]
    stopped = sampling.sample(model_input, 1, params(temperature=0.0, stop=[stop_token])).result().sequences[0]
    end = free.tokens.index(stop_token) + 1
    assert stopped.tokens == free.tokens[:end] and stopped.stop_reason == "stop"
    assert len(stopped.logprobs) == len(stopped.tokens)


def test_stop_string_ends_at_the_token_that_completes_it(trained, prompt):
    training, sampling = trained
    tokenizer = training.get_tokenizer()
    model_input = types.ModelInput.from_ints(prompt)
    free = sampling.sample(model_input, 1, params(temperature=0.0)).result().sequences[0]
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    before_eos = free.tokens[: free.tokens.index(eos)] if eos in free.tokens else free.tokens
    text = tokenizer.decode(before_eos[:6])  # EOS stops too, so the string must come before it
    target = text[-2:]
    stopped = sampling.sample(model_input, 1, params(temperature=0.0, stop=[target])).result().sequences[0]
    assert stopped.stop_reason == "stop"
    assert target in tokenizer.decode(stopped.tokens)
    assert target not in tokenizer.decode(stopped.tokens[:-1])


def test_a_stop_list_adds_to_eos_and_only_an_empty_one_disables_it(trained, prompt):
    """tinker 0.38: stop=None keeps EOS, a non-empty list stops there too, stop=[] never stops early."""
    _, sampling = trained
    eos = sampling.get_tokenizer().convert_tokens_to_ids("<|im_end|>")
    model_input = types.ModelInput.from_ints(prompt)
    free = sampling.sample(model_input, 1, params(temperature=0.0, max_tokens=24)).result().sequences[0]
    assert eos in free.tokens and free.stop_reason == "length"  # the model ends its turn, stop=[] runs on
    end = free.tokens.index(eos) + 1
    for stop in (None, ["a string it never writes"], [eos + 1 if free.tokens[0] != eos + 1 else eos + 2]):
        stopped = sampling.sample(model_input, 1, params(temperature=0.0, max_tokens=24, stop=stop)).result()
        assert stopped.sequences[0].tokens == free.tokens[:end], stop
        assert stopped.sequences[0].stop_reason == "stop"


def test_default_stop_is_the_models_eos(trained):
    _, sampling = trained
    eos = sampling.get_tokenizer().convert_tokens_to_ids("<|im_end|>")
    assert eos in sampling._stops(None)[0]
    assert sampling._stops([]) == (frozenset(), ())


def test_num_samples_and_response_types(trained, prompt):
    _, sampling = trained
    response = sampling.sample(types.ModelInput.from_ints(prompt), 5, params(max_tokens=4)).result()
    assert isinstance(response, types.SampleResponse) and len(response.sequences) == 5
    assert len({s.sequence_id for s in response.sequences}) == 5
    assert all(isinstance(s, types.SampledSequence) and len(s.tokens) == 4 for s in response.sequences)


def test_base_model_sampler_has_no_adapter(service, trained, prompt):
    training, _ = trained
    base = service.create_sampling_client(base_model=TINY).result()
    assert base.get_base_model() == TINY
    scored = base.compute_logprobs(types.ModelInput.from_ints(prompt)).result()
    fresh = service.create_lora_training_client(base_model=TINY, rank=4, seed=9).result()  # B = 0: base outputs
    expected = fresh.forward([rl_datum(prompt[:1], prompt[1:], [0.0] * (len(prompt) - 1), 0.0)], "importance_sampling")
    torch.testing.assert_close(
        torch.tensor(scored[1:]), expected.result().loss_fn_outputs[0]["logprobs"].to_torch(), rtol=0, atol=1e-5
    )


def test_a_dropped_sampler_still_answers_its_queued_requests(service, training, prompt):
    path = training.save_weights_for_sampler("dropped").result().path

    async def main():
        client = await service.create_sampling_client_async(model_path=path)
        future = client.sample(types.ModelInput.from_ints(prompt), 1, params(max_tokens=3))
        del client
        gc.collect()  # the client's adapter is released, but only after its queued request ran
        return await future

    assert len(asyncio.run(main()).sequences[0].tokens) == 3


def test_a_stand_in_ends_samples_at_its_context_a_model_asked_by_name_refuses(service, monkeypatch):
    """A Tinker name served by a local stand-in (GEM's max_tokens=2048 on gemlab/tiny-chat's 2048
    tokens) samples until the stand-in's context is full; the local model by its own name refuses."""
    monkeypatch.setenv("GEMLAB_LOCAL_MODEL", "gemlab/tiny-chat")
    stand_in = service.create_sampling_client(base_model="Qwen/Qwen3-4B-Instruct-2507").result()
    context = stand_in._model.context_length
    prompt = types.ModelInput.from_ints([5] * (context - 3))
    sequence = stand_in.sample(prompt, 1, params(max_tokens=2048)).result().sequences[0]
    assert (len(sequence.tokens), sequence.stop_reason) == (3, "length")
    by_name = service.create_sampling_client(base_model=stand_in._model.name).result()
    with pytest.raises(ValueError, match="max_tokens=2048 does not fit"):
        by_name.sample(prompt, 1, params(max_tokens=2048))
