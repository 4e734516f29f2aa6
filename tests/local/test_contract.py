"""The local clients offer tinker 0.38's public methods with the same signatures and the same
sync/async shape, so code written for Tinker runs unchanged (and drift in a new tinker release
fails here)."""

from __future__ import annotations

import asyncio
import inspect

import pytest
import tinker
from tinker import types

from tinker_emulator import TINY, LocalSamplingClient, LocalServiceClient, LocalTrainingClient

# Public members of tinker's clients that make no sense in-process, and why.
EXCLUDED = {
    "ServiceClient": {
        "holder": "property exposing the HTTP session holder (transport internals)",
        "create_rest_client": "REST client for server-side records of runs; nothing is stored on a server locally",
    },
    "TrainingClient": {},
    "SamplingClient": {
        "create": "static factory that takes the HTTP session holder (transport internals)",
    },
}
PAIRS = [
    (tinker.ServiceClient, LocalServiceClient),
    (tinker.TrainingClient, LocalTrainingClient),
    (tinker.SamplingClient, LocalSamplingClient),
]


def public_members(cls: type) -> list[str]:
    return sorted(name for name in dir(cls) if not name.startswith("_"))


def shape(signature: inspect.Signature) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@pytest.mark.parametrize("tinker_cls,local_cls", PAIRS, ids=lambda c: c.__name__)
def test_same_public_methods_and_signatures(tinker_cls, local_cls):
    excluded = EXCLUDED[tinker_cls.__name__]
    for name in public_members(tinker_cls):
        if name in excluded:
            continue
        ours = inspect.getattr_static(local_cls, name)
        theirs = inspect.getattr_static(tinker_cls, name)
        assert ours is not theirs, f"{local_cls.__name__}.{name} is inherited from tinker, not implemented locally"
        assert type(ours) is type(theirs), f"{name}: {type(ours).__name__} vs tinker's {type(theirs).__name__}"
        ours_fn, theirs_fn = getattr(local_cls, name), getattr(tinker_cls, name)
        assert shape(inspect.signature(ours_fn)) == shape(inspect.signature(theirs_fn)), name
        assert inspect.iscoroutinefunction(inspect.unwrap(ours_fn)) == inspect.iscoroutinefunction(
            inspect.unwrap(theirs_fn)
        ), f"{name}: sync/async differs from tinker"
    assert set(excluded) <= set(public_members(tinker_cls)), "an exclusion no longer exists in tinker"


def test_clients_are_tinker_clients(training, service):
    assert isinstance(service, tinker.ServiceClient)
    assert isinstance(training, tinker.TrainingClient)
    assert isinstance(training.save_weights_and_get_sampling_client().result(), tinker.SamplingClient)


def test_future_shapes_follow_tinker(service, prompt):
    async def main():
        # ServiceClient: plain methods give a future of the client; _async gives the client
        future = service.create_lora_training_client(base_model=TINY, rank=2, seed=1)
        assert isinstance(future, tinker.APIFuture)
        training = await service.create_lora_training_client_async(base_model=TINY, rank=2, seed=1)
        assert isinstance(training, LocalTrainingClient) and isinstance(await future, LocalTrainingClient)
        # TrainingClient: plain methods give a future; _async are coroutines giving that future
        datum = types.Datum(
            model_input=types.ModelInput.from_ints(prompt[:-1]),
            loss_fn_inputs={"target_tokens": prompt[1:], "weights": [1.0] * (len(prompt) - 1)},
        )
        fb = await training.forward_backward_async([datum], "cross_entropy")
        optim = training.optim_step(types.AdamParams())
        assert isinstance(fb, tinker.APIFuture) and isinstance(optim, tinker.APIFuture)
        assert "loss:sum" in (await fb.result_async()).metrics
        assert isinstance(await optim, types.OptimStepResponse)
        saved = await (await training.save_state_async("contract")).result_async()
        assert saved.path.startswith("local://")
        # SamplingClient: sample_async needs one await, sample's future is awaitable too
        path = (await training.save_weights_for_sampler("contract")).path
        sampling = await service.create_sampling_client_async(model_path=path)
        params = types.SamplingParams(max_tokens=3)
        one = await sampling.sample_async(types.ModelInput.from_ints(prompt), 1, params)
        two = await sampling.sample(types.ModelInput.from_ints(prompt), 1, params)
        assert isinstance(one, types.SampleResponse) and isinstance(two, types.SampleResponse)
        return training

    training = asyncio.run(main())
    info = training.get_info()
    assert info.lora_rank == 2 and info.model_data.model_name == TINY
    assert service.get_server_capabilities().supported_models[0].model_name == TINY


def test_client_future_can_still_be_used_as_the_client(service, prompt):
    future = service.create_lora_training_client(base_model=TINY, rank=2, seed=1)
    with pytest.warns(FutureWarning):
        tokenizer = future.get_tokenizer()
    assert tokenizer.encode("hi")


def test_requests_run_in_submission_order(training, prompt):
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(prompt[:-1]),
        loss_fn_inputs={"target_tokens": prompt[1:], "weights": [1.0] * (len(prompt) - 1)},
    )
    first = training.forward([datum], "cross_entropy")
    training.forward_backward([datum], "cross_entropy")
    training.optim_step(types.AdamParams(learning_rate=0.05))
    last = training.forward([datum], "cross_entropy")
    assert last.result().metrics["loss:sum"] < first.result().metrics["loss:sum"]
