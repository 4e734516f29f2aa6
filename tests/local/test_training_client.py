"""``LocalTrainingClient``'s contract on the tiny model (../shared/reference/tinker-api.md): what
``forward_backward`` returns per datum, ``importance_sampling`` as its formula gives it, ``optim_step``
as Adam's rule written out by hand, requests resolving in submission order, and clear errors for bad
input. (tests/local/test_losses.py checks every loss's gradient against autograd.)"""

from __future__ import annotations

import math

import pytest
import torch
from tinker import types

from tests.helpers.local import nudge, rl_datum, sft_datum, weights
from tinker_emulator import lora, scoring


def model_logprobs(training, datum: types.Datum) -> torch.Tensor:
    """Logprob of each target token under the run's current weights, computed by calling the model."""
    with torch.no_grad(), lora.active(training._model, training._adapter) as model:
        logits = model(input_ids=torch.tensor([datum.model_input.to_ints()])).logits[0].float()
    targets = datum.loss_fn_inputs["target_tokens"].to_torch().long()
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]


@pytest.mark.parametrize("micro_batches", ["one", "one per datum"])
def test_forward_backward_importance_sampling_is_its_formula(training, prompt, micro_batches, monkeypatch):
    if micro_batches == "one per datum":  # a logits budget of one position: each datum its own pass
        monkeypatch.setattr(scoring, "MAX_LOGIT_FLOATS", training.vocab_size)
    nudge(training, prompt)  # LoRA's B is no longer zero: the adapter takes part
    data = [rl_datum(prompt, [11, 12, 13], [-2.0, -1.5, -3.0], 1.5), rl_datum(prompt, [20, 21], [-2.5, -1.0], -0.7)]
    out = training.forward_backward(data, "importance_sampling").result()
    assert out.loss_fn_output_type == "ArrayRecord"
    assert len(out.loss_fn_outputs) == len(data)
    total = 0.0
    for datum, output in zip(data, out.loss_fn_outputs, strict=True):
        assert set(output) == {"logprobs", "elementwise_loss"}
        lp = model_logprobs(training, datum)
        torch.testing.assert_close(output["logprobs"].to_torch(), lp, rtol=1e-5, atol=1e-5)
        q, advantage = (datum.loss_fn_inputs[k].to_torch() for k in ("logprobs", "advantages"))
        elementwise = -torch.exp(lp - q) * advantage  # sum(-r * A), r = exp(lp - sampler lp)
        torch.testing.assert_close(output["elementwise_loss"].to_torch(), elementwise, rtol=1e-5, atol=1e-6)
        total += float(elementwise.sum())
    assert out.metrics["loss:sum"] == pytest.approx(total, rel=1e-5)
    assert any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in training._params)


def test_optim_step_is_adams_rule(training, prompt):
    """Two AdamW steps by hand: decoupled weight decay, then the bias-corrected moments."""
    lr, b1, b2, eps, wd = 1e-2, 0.8, 0.9, 1e-8, 0.1
    params = types.AdamParams(learning_rate=lr, beta1=b1, beta2=b2, eps=eps, weight_decay=wd)
    initial = weights(training)
    expected = weights(training)
    m = [torch.zeros_like(p) for p in expected]
    v = [torch.zeros_like(p) for p in expected]
    for t, answer in enumerate(([5, 6, 7], [8, 9]), start=1):
        training.forward_backward([sft_datum(prompt, answer)], "cross_entropy").result()
        grads = [p.grad for p in training._params]
        response = training.optim_step(params).result()
        norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads if g is not None))
        assert response.metrics == pytest.approx({"grad_norm:mean": norm, "learning_rate:mean": lr})
        for i, g in enumerate(grads):
            if g is None:  # no gradient: AdamW leaves the parameter alone
                continue
            expected[i] = expected[i] * (1 - lr * wd)
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            expected[i] = expected[i] - lr * (m[i] / (1 - b1**t)) / ((v[i] / (1 - b2**t)).sqrt() + eps)
        assert all(p.grad is None for p in training._params)  # the step clears the gradients
        for got, want in zip(weights(training), expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert sum(not torch.equal(a, b) for a, b in zip(expected, initial, strict=True)) == len(initial)  # all moved


def test_requests_resolve_in_submission_order(training, prompt):
    datum = sft_datum(prompt, [5, 6, 7])
    finished: list[str] = []
    futures = {  # sent without waiting: each queues behind the one before
        "forward before": training.forward([datum], "cross_entropy"),
        "forward_backward": training.forward_backward([datum], "cross_entropy"),
        "optim_step": training.optim_step(types.AdamParams(learning_rate=0.05)),
        "forward after": training.forward([datum], "cross_entropy"),
    }
    for name, future in futures.items():
        future.future().add_done_callback(lambda _, name=name: finished.append(name))
    after = futures["forward after"].result()
    assert finished == list(futures)
    before = futures["forward before"].result()
    # the first forward ran on the weights from before the step, the last one on the weights after it
    backward = futures["forward_backward"].result()
    torch.testing.assert_close(
        before.loss_fn_outputs[0]["logprobs"].to_torch(), backward.loss_fn_outputs[0]["logprobs"].to_torch()
    )
    torch.testing.assert_close(
        after.loss_fn_outputs[0]["logprobs"].to_torch(), model_logprobs(training, datum), rtol=1e-5, atol=1e-5
    )
    assert after.metrics["loss:sum"] < before.metrics["loss:sum"]


def _length_mismatch(prompt: list[int]) -> types.Datum:
    datum = rl_datum(prompt, [4, 5], [-1.0, -1.0], 1.0)
    datum.loss_fn_inputs["advantages"] = types.TensorData.from_torch(torch.zeros(3))
    return datum


def _non_finite(prompt: list[int]) -> types.Datum:
    return rl_datum(prompt, [4, 5], [-1.0, -1.0], math.nan)


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda t, p: t.forward_backward([sft_datum(p, [4])], "reinforce"), ValueError, "importance_sampling, ppo"),
        (lambda t, p: t.forward_backward([], "cross_entropy"), ValueError, "No data provided"),
        (
            lambda t, p: t.forward_backward([sft_datum(p, [4]), "text"], "cross_entropy"),
            TypeError,
            r"data\[1\] is a str",
        ),
        (
            lambda t, p: t.forward_backward([_length_mismatch(p)], "importance_sampling"),
            ValueError,
            r"data\[0\]\.loss_fn_inputs\['advantages'\] has shape \[3\]",
        ),
        (
            lambda t, p: t.forward_backward([sft_datum(p, [4])], "importance_sampling"),
            ValueError,
            r"lacks \['logprobs', 'advantages'\]",
        ),
        (
            lambda t, p: t.forward_backward([_non_finite(p)], "importance_sampling"),
            ValueError,
            "is nan: values must be finite",
        ),
        (lambda t, p: t.forward([sft_datum(p, [t.vocab_size])], "cross_entropy"), ValueError, "outside the vocabulary"),
        (lambda t, p: t.optim_step(None), TypeError, "pass tinker.types.AdamParams"),
        (
            lambda t, p: t.optim_step(types.AdamParams(learning_rate=0.1, beta1=1.0)),
            ValueError,
            r"AdamParams\.beta1=1\.0",
        ),
        (
            lambda t, p: t.optim_step(
                types.AdamParams(learning_rate=0.1), adam_params=types.AdamParams(learning_rate=0.1)
            ),
            ValueError,
            "not both",
        ),
    ],
    ids=[
        "loss name",
        "no data",
        "not a datum",
        "lengths",
        "missing input",
        "nan",
        "vocabulary",
        "no params",
        "beta1",
        "both",
    ],
)
def test_bad_input_is_refused_when_called_and_changes_nothing(training, prompt, call, error, message):
    before = weights(training)
    with pytest.raises(error, match=message):
        call(training, prompt)
    training.optim_step(types.AdamParams(learning_rate=0.1)).result()  # nothing was queued: no gradient to apply
    for got, want in zip(weights(training), before, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
