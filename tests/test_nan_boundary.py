"""NaN and inf never reach the weights: refused at the local backend's boundary, and a run whose
update blows up stops before that step is logged or saved."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tinker import types

from gemlab import Trainer, make_config
from gemlab.datums import policy_gradient_datum
from gemlab.trainer import TrainingDiverged
from tinker_emulator import TINY, LocalServiceClient

PROMPT, ACTION = [1, 2, 3, 4], [5, 6]


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    return LocalServiceClient(device="cpu", root=tmp_path_factory.mktemp("nan"))


@pytest.fixture
def training(service):
    return service.create_lora_training_client(base_model=TINY, rank=8, seed=0).result()


def _weights(training) -> list[torch.Tensor]:
    return [p.detach().clone() for p in training._params]


@pytest.mark.parametrize(
    "logprobs, advantage, message",
    [
        ([-1.0, -1.0], math.nan, r"data\[0\].loss_fn_inputs\['advantages'\]\[3\] is nan"),
        ([-1.0, math.inf], 1.0, r"data\[0\].loss_fn_inputs\['logprobs'\]\[4\] is inf"),
    ],
)
def test_non_finite_datum_is_refused_naming_it(training, logprobs, advantage, message) -> None:
    with pytest.raises(ValueError, match=message):
        training.forward_backward([policy_gradient_datum(PROMPT, ACTION, logprobs, advantage)], "importance_sampling")


@pytest.mark.parametrize(
    "field, value", [("learning_rate", math.nan), ("learning_rate", math.inf), ("eps", math.nan), ("beta1", 1.0)]
)
def test_non_finite_adam_params_are_refused(training, field, value) -> None:
    params = types.AdamParams(**{"learning_rate": 1e-3, field: value})
    with pytest.raises(ValueError, match=f"AdamParams.{field}={value} is not allowed"):
        training.optim_step(params)


def test_step_that_would_make_weights_non_finite_is_refused_and_undone(training) -> None:
    training.forward_backward(
        [policy_gradient_datum(PROMPT, ACTION, [-1.0, -1.0], 1.0)], "importance_sampling"
    ).result()
    training.optim_step(types.AdamParams(learning_rate=1e-3)).result()  # Adam state is non-zero from here
    before, state = _weights(training), json.dumps(str(training._optimizer.state_dict()["state"][0]["exp_avg"].sum()))
    training.forward_backward(
        [policy_gradient_datum(PROMPT, ACTION, [-1.0, -1.0], 1.0)], "importance_sampling"
    ).result()
    with pytest.raises(ValueError, match="would make the weights non-finite: refused"):
        training.optim_step(types.AdamParams(learning_rate=3e38)).result()
    assert all(torch.equal(a, b) for a, b in zip(before, _weights(training), strict=True))
    assert json.dumps(str(training._optimizer.state_dict()["state"][0]["exp_avg"].sum())) == state


def test_nan_temperature_is_refused(service, training) -> None:
    sampler = training.save_weights_and_get_sampling_client().result()
    with pytest.raises(ValueError, match="temperature >= 0"):
        sampler.sample(types.ModelInput.from_ints(PROMPT), 1, types.SamplingParams(max_tokens=2, temperature=math.nan))


def test_a_run_that_blows_up_stops_before_logging_or_saving(tmp_path) -> None:
    config = make_config(
        "laptop", log_dir=str(tmp_path), run_name="boom", batch_size=32, num_env=8, save_every=1, learning_rate=1e30
    )
    trainer = Trainer(config, progress=False)
    trainer.step()  # finite, but the weights are now huge
    with pytest.raises(TrainingDiverged, match="step 1 diverged: the sampler returned non-finite logprobs"):
        trainer.step()
    trainer.close()
    rows = (trainer.run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and all(math.isfinite(v) for v in json.loads(rows[0]).values())
